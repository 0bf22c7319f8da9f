#ifndef STATESERVER_TYPE_REFLECTION_H
#define STATESERVER_TYPE_REFLECTION_H

#include <stdint.h>

/// Reads the case names of a Swift enum from the Swift runtime's type metadata (the ABI-stable
/// layout of swift/docs/ABI/TypeMetadata.rst: metadata -> nominal type descriptor -> field
/// descriptor -> field records). The metadata is given as an address so that the Swift side
/// needs no unsafe code: `UInt(bitPattern: ObjectIdentifier(T.self))`.
///
/// Both functions read only what the runtime laid out for that type, and only when the
/// metadata's kind says it is an enum (kind 0x201) whose descriptor is an enum's (kind 18) with
/// a field descriptor; otherwise they return -1.

/// The number of cases of the enum whose metadata is at `metadata`, or -1.
int32_t stateserver_enum_case_count(uintptr_t metadata);

/// Byte `offset` of the name of case `index` (declaration order for enums without payloads),
/// 0 past its end, or -1 when there is no such enum or case.
int32_t stateserver_enum_case_name_byte(uintptr_t metadata, int32_t index, int32_t offset);

#endif
