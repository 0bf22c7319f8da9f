#include "type_reflection.h"

#include <stddef.h>
#include <string.h>

// Metadata kinds and context descriptor kinds (swift/ABI/MetadataValues.h).
enum { metadata_kind_enum = 0x201, descriptor_kind_enum = 18 };

// A relative direct pointer: a 32-bit offset from the field's own address (0: null).
static const void *relative(const int32_t *field) {
    int32_t offset;
    memcpy(&offset, field, sizeof offset);
    if (offset == 0) return NULL;
    return (const char *)field + offset;
}

// TargetEnumDescriptor: Flags, Parent, Name, AccessFunction, Fields (each 32 bits), then the
// enum's case counts. FieldDescriptor: MangledTypeName, Superclass (32 bits each), Kind,
// FieldRecordSize (16 bits each), NumFields (32 bits), then the records: Flags,
// MangledTypeName, FieldName (32 bits each).
typedef struct {
    const char *records;
    uint32_t count;
    uint16_t size;
} field_records;

static int records_of(uintptr_t metadata, field_records *out) {
    if (metadata == 0) return 0;
    const uintptr_t *words = (const uintptr_t *)metadata;
    if (words[0] != metadata_kind_enum) return 0;
    const char *descriptor = (const char *)words[1];
    if (descriptor == NULL) return 0;
    uint32_t flags;
    memcpy(&flags, descriptor, sizeof flags);
    if ((flags & 0x1F) != descriptor_kind_enum) return 0;
    const char *fields = relative((const int32_t *)(descriptor + 16));
    if (fields == NULL) return 0;
    uint16_t size;
    uint32_t count;
    memcpy(&size, fields + 10, sizeof size);
    memcpy(&count, fields + 12, sizeof count);
    if (size < 12 || count > 100000) return 0;
    out->records = fields + 16;
    out->count = count;
    out->size = size;
    return 1;
}

int32_t stateserver_enum_case_count(uintptr_t metadata) {
    field_records records;
    if (!records_of(metadata, &records)) return -1;
    return (int32_t)records.count;
}

int32_t stateserver_enum_case_name_byte(uintptr_t metadata, int32_t index, int32_t offset) {
    field_records records;
    if (!records_of(metadata, &records) || index < 0 || (uint32_t)index >= records.count || offset < 0) return -1;
    const char *record = records.records + (size_t)index * records.size;
    const char *name = relative((const int32_t *)(record + 8));
    if (name == NULL) return -1;
    // Names are short identifiers; never read past a terminating zero.
    for (int32_t i = 0; i < offset; i++) {
        if (name[i] == 0) return 0;
    }
    return (unsigned char)name[offset];
}
