// libFuzzer target: JSON Patch (Sources/StateJSON/JSONPatch.swift), as the journal, the event
// streams and recordings use it.
//
// An input that parses as an array [a, b, p...]: diff(a, b) on canonical bytes is a patch that
// applied to a gives b (and within a limit it is that same patch or nil); each further element p
// is applied to a as a patch: it applies, or it refuses and leaves a as it was, and the bytes
// API agrees with the value API. Any input also goes through diff as raw bytes (its halves, and
// against a parsed part), which must never trap: the journal diffs whatever it stores.
import FuzzSupport
import StateStore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzPatch(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let bytes = inputBytes(start, count)
    let middle = bytes.count / 2
    _ = JSONPatch.diff(from: Array(bytes[..<middle]), to: Array(bytes[middle...]))
    _ = JSONPatch.diff(from: Array(bytes[middle...]), to: Array(bytes[..<middle]), limit: middle)
    guard case .array(let items)? = JSONCoding.parse(bytes), items.count >= 2 else { return 0 }
    let a = items[0]
    let b = items[1]
    _ = JSONPatch.diff(from: bytes, to: b.bytes)
    _ = JSONPatch.diff(from: a.bytes, to: bytes)

    guard let patch = JSONPatch.diff(from: a.bytes, to: b.bytes) else { finding("diff without a limit gave nil") }
    guard case .array(let operations)? = JSONCoding.parse(patch) else {
        finding("diff wrote something that is not a JSON array: \(show(patch))")
    }
    if a == b { expect(operations.isEmpty, "diff of equal documents is \(show(patch))") }
    var patched = a
    do {
        try JSONPatch.apply(.array(operations), to: &patched)
    } catch {
        finding("diff(\(show(a)), \(show(b))) = \(show(patch)) does not apply: \(error)")
    }
    expect(patched == b, "diff(\(show(a)), \(show(b))) = \(show(patch)) applied gives \(show(patched))")
    let limit = Int(bytes.first ?? 0) * 4
    if let limited = JSONPatch.diff(from: a.bytes, to: b.bytes, limit: limit) {
        expect(limited.count <= limit, "diff with limit \(limit) wrote \(limited.count) bytes")
        expect(limited == patch, "diff with limit \(limit) wrote \(show(limited)), without \(show(patch))")
    } else {
        expect(patch.count > limit, "diff with limit \(limit) gave nil for a patch of \(patch.count) bytes")
    }

    for candidate in items.dropFirst(2) {
        var document = a
        let applied: Bool
        do {
            try JSONPatch.apply(candidate, to: &document)
            applied = true
        } catch {
            expect(document == a, "a refused patch \(show(candidate)) changed the document to \(show(document))")
            applied = false
        }
        // A patch adds at most its own bytes and what its copies carry, and nests no deeper
        // than the parser reads: writing the result is bounded by the input.
        let bound = a.bytes.count + candidate.bytes.count + JSONPatch.defaultMaxCopiedBytes
        guard document.encodedCount(atMost: bound) != nil else {
            finding("\(show(candidate)) applied to \(show(a)) made a document over \(bound) bytes or 512 levels")
        }
        let written = document.bytes
        do {
            let result = try JSONPatch.apply(patch: candidate.bytes, to: a.bytes)
            expect(applied, "the bytes API applied \(show(candidate)), the value API refused it")
            expect(result == written, "the bytes API gave \(show(result)), the value API \(show(written))")
        } catch {
            expect(!applied, "the value API applied \(show(candidate)), the bytes API refused it: \(error)")
        }
        // What a patch made can be diffed against where it started, both ways.
        if applied {
            guard let back = JSONPatch.diff(from: written, to: a.bytes), case .array? = JSONCoding.parse(back) else {
                finding("no diff back from \(show(written))")
            }
            var restored = document
            do { try JSONPatch.apply(JSONCoding.parse(back) ?? .null, to: &restored) } catch {
                finding("the diff back \(show(back)) does not apply: \(error)")
            }
            expect(restored == a, "the diff back gave \(show(restored)), not \(show(a))")
        }
    }
    return 0
}
