/// JSON Patch (RFC 6902): the difference between two versions of a state, and applying it.
///
/// The journal stores each change as the patch from the previous state (or the whole state when
/// the patch is not smaller), and event streams send patches to clients that ask for them, so
/// both sides of the wire and the disk share one description of a change.
///
/// ``diff(from:to:limit:)`` works on the encoded bytes of the two states without building either
/// as a tree: equal values are found by comparing bytes (states are encoded canonically: compact,
/// keys sorted), and the walk descends only where bytes differ. Arrays are compared by their
/// common prefix and suffix, so appending, inserting or removing one element, or changing one in
/// place, costs one operation whatever the array's length. Its operations are `add`, `remove` and
/// `replace`; ``apply(_:to:)`` also takes `test`, `move` and `copy`.
public enum JSONPatch {
    /// Why a patch cannot be applied (or is not a patch).
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public let message: String
        public var description: String { message }
        init(_ message: String) { self.message = message }
    }

    // MARK: Diff

    /// The patch that turns `old` into `new` (both JSON documents, as encoded by this module or
    /// any canonical writer), as the bytes of a JSON array of operations; `nil` when the patch
    /// would be longer than `limit` bytes (then store or send `new` itself). An empty array
    /// (`[]`) when the two are equal.
    public static func diff(from old: [UInt8], to new: [UInt8], limit: Int = .max) -> [UInt8]? {
        var writer = PatchWriter(limit: limit)
        var scanner = DiffScanner(old: old, new: new)
        // The documents are whole values: their ranges are the bytes between the blanks around
        // them (a malformed one shows when it is walked, and is then replaced whole).
        let oldRange = Scanner.trimmed(old.span)
        let newRange = Scanner.trimmed(new.span)
        guard let oldRange, let newRange else {
            // Not JSON we can walk: the whole document.
            writer.op("replace", path: [], value: new[...])
            return writer.finish()
        }
        scanner.diff(oldRange, newRange, path: [], into: &writer)
        return writer.finish()
    }

    // MARK: Apply

    /// The deepest a patch may nest a value (containers around it plus its own): the parser's
    /// default, so a patched document can always be written and read again.
    public static let defaultMaxDepth = 512
    /// How many bytes (as JSON) the `copy` and `move` operations of one patch may carry
    /// together: 1 MiB, the default ceiling of a feature's state. ``diff(from:to:limit:)`` writes
    /// neither, so only patches from elsewhere (a recording) meet this.
    public static let defaultMaxCopiedBytes = 1 << 20

    /// Applies `patch` (a JSON array of operations) to `document`, in order; all or nothing.
    ///
    /// A patch is bounded by more than its own size: an operation that would nest a value
    /// deeper than `maxDepth` levels fails, and so does one that makes the patch's `copy` and
    /// `move` operations carry more than `maxCopiedBytes` together. A copy shares its value
    /// rather than duplicating it, so without the bound a few dozen copies of the whole
    /// document make one whose JSON has 2^40 bytes, and copies into ever deeper paths one too
    /// deep to write or free on a thread's stack. Measuring stops at the bound, so no patch
    /// costs more than its size and `maxCopiedBytes`.
    public static func apply(
        _ patch: JSONValue, to document: inout JSONValue, maxDepth: Int = defaultMaxDepth,
        maxCopiedBytes: Int = defaultMaxCopiedBytes
    ) throws(Failure) {
        guard case .array(let operations) = patch else { throw Failure("a patch must be a JSON array") }
        var result = document
        var bounds = Bounds(maxDepth: maxDepth, copiedBytesLeft: maxCopiedBytes, maxCopiedBytes: maxCopiedBytes)
        for (index, operation) in operations.enumerated() {
            do throws(Failure) {
                try apply(operation: operation, to: &result, bounds: &bounds)
            } catch {
                throw Failure("operation \(index): \(error.message)")
            }
        }
        document = result
    }

    /// What is left of one patch's bounds while it applies.
    private struct Bounds {
        let maxDepth: Int
        var copiedBytesLeft: Int
        let maxCopiedBytes: Int

        /// Refuses `value` placed under `path` (its tokens) when it would nest too deep.
        func place(_ value: JSONValue, under path: [String]) throws(Failure) {
            if case .tooDeep = value.measure(maxBytes: .max, maxDepth: maxDepth - path.count) { throw tooDeep() }
        }

        /// Charges a copied or moved `value` to the patch, and refuses it under `path` when it
        /// would nest too deep or carry more than is left.
        mutating func carry(_ value: JSONValue, under path: [String]) throws(Failure) {
            switch value.measure(maxBytes: copiedBytesLeft, maxDepth: maxDepth - path.count) {
            case .fits(let bytes): copiedBytesLeft -= bytes
            case .tooDeep: throw tooDeep()
            case .tooLarge: throw Failure("the patch's copy and move operations carry more than \(maxCopiedBytes) bytes")
            }
        }

        func tooDeep() -> Failure { Failure("the value would nest deeper than \(maxDepth) levels") }
    }

    /// Applies patch bytes to document bytes; the result as compact JSON with sorted keys.
    public static func apply(patch: [UInt8], to document: [UInt8]) throws(Failure) -> [UInt8] {
        var value: JSONValue
        let operations: JSONValue
        do throws(JSONParser.Failure) {
            value = try JSONParser.parse(document)
            operations = try JSONParser.parse(patch)
        } catch {
            throw Failure("not JSON: \(error)")
        }
        try apply(operations, to: &value)
        return value.bytes
    }

    private static func apply(operation: JSONValue, to document: inout JSONValue, bounds: inout Bounds) throws(Failure) {
        guard case .object(let fields) = operation else { throw Failure("an operation must be an object") }
        guard case .string(let op)? = fields["op"] else { throw Failure("the member 'op' must be a string") }
        guard case .string(let pathText)? = fields["path"] else { throw Failure("the member 'path' must be a string") }
        let path = try pointer(pathText)
        switch op {
        case "add", "replace", "test":
            guard let value = fields["value"] else { throw Failure("'\(op)' needs a 'value'") }
            if op != "test" { try bounds.place(value, under: path) }
            switch op {
            case "add": try edit(&document, path[...], .add(value))
            case "replace": try edit(&document, path[...], .replace(value))
            default:
                guard try read(document, path[...]) == value else { throw Failure("test failed at '\(pathText)'") }
            }
        case "remove":
            _ = try edit(&document, path[...], .remove)
        case "move", "copy":
            guard case .string(let fromText)? = fields["from"] else { throw Failure("'\(op)' needs a string 'from'") }
            let from = try pointer(fromText)
            let value: JSONValue
            if op == "move" {
                guard !(path.count > from.count && Array(path.prefix(from.count)) == from) else {
                    throw Failure("cannot move '\(fromText)' into itself")
                }
                // Moving up or sideways cannot nest deeper, and costs nothing.
                if path.count > from.count {
                    try bounds.carry(try read(document, from[...]), under: path)
                }
                value = try edit(&document, from[...], .remove)
            } else {
                value = try read(document, from[...])
                try bounds.carry(value, under: path)
            }
            try edit(&document, path[...], .add(value))
        default:
            throw Failure("unknown operation '\(op)'")
        }
    }

    private enum Edit {
        case add(JSONValue)
        case replace(JSONValue)
        case remove
    }

    /// The tokens of a JSON pointer (RFC 6901).
    static func pointer(_ text: String) throws(Failure) -> [String] {
        if text.isEmpty { return [] }
        guard text.hasPrefix("/") else { throw Failure("the path '\(text)' must be empty or start with '/'") }
        return text.dropFirst().split(separator: "/", omittingEmptySubsequences: false).map {
            $0.replacingOccurrences(of: "~1", with: "/").replacingOccurrences(of: "~0", with: "~")
        }
    }

    private static func read(_ value: JSONValue, _ path: ArraySlice<String>) throws(Failure) -> JSONValue {
        guard let token = path.first else { return value }
        switch value {
        case .object(let fields):
            guard let child = fields[token] else { throw Failure("no member '\(token)'") }
            return try read(child, path.dropFirst())
        case .array(let items):
            guard let index = Int(token), index >= 0, index < items.count, String(index) == token else {
                throw Failure("no element '\(token)'")
            }
            return try read(items[index], path.dropFirst())
        default:
            throw Failure("'\(token)' is inside a \(value.typeName)")
        }
    }

    /// Edits `value` at `path`, moving each container out of its parent while it changes so it
    /// is never copied; returns the value removed or replaced (`.null` for an add).
    @discardableResult
    private static func edit(_ value: inout JSONValue, _ path: ArraySlice<String>, _ edit: Edit) throws(Failure) -> JSONValue {
        guard let token = path.first else {
            // The whole document.
            let old = value
            switch edit {
            case .add(let new), .replace(let new): value = new
            case .remove: throw Failure("cannot remove the whole document")
            }
            return old
        }
        let last = path.count == 1
        switch value {
        case .object(var fields):
            value = .null
            defer { value = .object(fields) }
            if last {
                switch edit {
                case .add(let new): return fields.updateValue(new, forKey: token) ?? .null
                case .replace(let new):
                    guard let old = fields.updateValue(new, forKey: token) else {
                        fields[token] = nil
                        throw Failure("no member '\(token)' to replace")
                    }
                    return old
                case .remove:
                    guard let old = fields.removeValue(forKey: token) else { throw Failure("no member '\(token)' to remove") }
                    return old
                }
            }
            guard var child = fields.removeValue(forKey: token) else { throw Failure("no member '\(token)'") }
            defer { fields[token] = child }
            return try self.edit(&child, path.dropFirst(), edit)
        case .array(var items):
            value = .null
            defer { value = .array(items) }
            if last, case .add(let new) = edit {
                if token == "-" {
                    items.append(new)
                    return .null
                }
                guard let index = Int(token), index >= 0, index <= items.count, String(index) == token else {
                    throw Failure("no position '\(token)' in an array of \(items.count)")
                }
                items.insert(new, at: index)
                return .null
            }
            guard let index = Int(token), index >= 0, index < items.count, String(index) == token else {
                throw Failure("no element '\(token)' in an array of \(items.count)")
            }
            if last {
                switch edit {
                case .add: return .null  // handled above
                case .replace(let new):
                    let old = items[index]
                    items[index] = new
                    return old
                case .remove: return items.remove(at: index)
                }
            }
            var child = items[index]
            items[index] = .null
            defer { items[index] = child }
            return try self.edit(&child, path.dropFirst(), edit)
        default:
            throw Failure("'\(token)' is inside a \(value.typeName)")
        }
    }
}

// MARK: - Walking encoded JSON

/// Finds the extent of values in JSON bytes without decoding them.
/// Walks JSON text by its structure only (strings, brackets, commas), over a `Span` of its
/// bytes: no copies, no reference counting, one bounds check per byte read.
enum Scanner {
    static func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 }

    static func skipSpace(_ bytes: Span<UInt8>, _ index: inout Int) {
        while index < bytes.count, isSpace(bytes[index]) { index += 1 }
    }

    /// The bytes between leading and trailing blanks; nil when there are none.
    static func trimmed(_ bytes: Span<UInt8>) -> Range<Int>? {
        var lower = 0
        skipSpace(bytes, &lower)
        var upper = bytes.count
        while upper > lower, isSpace(bytes[upper - 1]) { upper -= 1 }
        return lower < upper ? lower..<upper : nil
    }

    /// The range of the value starting at or after `start` (after blanks); nil when malformed.
    static func valueRange(in bytes: Span<UInt8>, from start: Int) -> Range<Int>? {
        var index = start
        skipSpace(bytes, &index)
        guard let end = valueEnd(bytes, index) else { return nil }
        return index..<end
    }

    /// The end (exclusive) of the value starting at `start`.
    static func valueEnd(_ bytes: Span<UInt8>, _ start: Int) -> Int? {
        guard start < bytes.count else { return nil }
        switch bytes[start] {
        case UInt8(ascii: "\""): return stringEnd(bytes, start)
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            // Depth and indices stay below `bytes.count`, so `&+` and `&-` cannot wrap.
            var depth = 0
            var index = start
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    guard let end = stringEnd(bytes, index) else { return nil }
                    index = end
                    continue
                }
                if byte == UInt8(ascii: "{") || byte == UInt8(ascii: "[") {
                    depth &+= 1
                } else if byte == UInt8(ascii: "}") || byte == UInt8(ascii: "]") {
                    depth &-= 1
                    if depth == 0 { return index &+ 1 }
                }
                index &+= 1
            }
            return nil
        default:
            var index = start
            while index < bytes.count {
                switch bytes[index] {
                case UInt8(ascii: ","), UInt8(ascii: "]"), UInt8(ascii: "}"): return index
                case let byte where isSpace(byte): return index
                default: index += 1
                }
            }
            return index
        }
    }

    /// The end (exclusive, after the closing quote) of the string starting at `start`.
    static func stringEnd(_ bytes: Span<UInt8>, _ start: Int) -> Int? {
        guard start >= 0 else { return nil }
        // Indices stay below `bytes.count`, so `&+` cannot wrap.
        var index = start &+ 1
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") { return index &+ 1 }
            if byte == UInt8(ascii: "\\") {
                index &+= 2
                continue
            }
            index &+= 1
        }
        return nil
    }

    /// The members of the object at `range`: each key's range (with quotes) and value's range.
    static func members(_ bytes: Span<UInt8>, _ range: Range<Int>) -> [(key: Range<Int>, value: Range<Int>)]? {
        var result: [(key: Range<Int>, value: Range<Int>)] = []
        var index = range.lowerBound + 1
        skipSpace(bytes, &index)
        if index < range.upperBound, bytes[index] == UInt8(ascii: "}") { return result }
        while index < range.upperBound {
            guard bytes[index] == UInt8(ascii: "\""), let keyEnd = stringEnd(bytes, index) else { return nil }
            let key = index..<keyEnd
            index = keyEnd
            skipSpace(bytes, &index)
            guard index < range.upperBound, bytes[index] == UInt8(ascii: ":") else { return nil }
            index += 1
            skipSpace(bytes, &index)
            guard let valueEnd = valueEnd(bytes, index) else { return nil }
            result.append((key, index..<valueEnd))
            index = valueEnd
            skipSpace(bytes, &index)
            guard index < range.upperBound else { return nil }
            if bytes[index] == UInt8(ascii: "}") { return result }
            guard bytes[index] == UInt8(ascii: ",") else { return nil }
            index += 1
            skipSpace(bytes, &index)
        }
        return nil
    }

    /// The elements of the array at `range`.
    static func elements(_ bytes: Span<UInt8>, _ range: Range<Int>) -> [Range<Int>]? {
        var result: [Range<Int>] = []
        var index = range.lowerBound + 1
        skipSpace(bytes, &index)
        if index < range.upperBound, bytes[index] == UInt8(ascii: "]") { return result }
        while index < range.upperBound {
            guard let end = valueEnd(bytes, index) else { return nil }
            result.append(index..<end)
            index = end
            skipSpace(bytes, &index)
            guard index < range.upperBound else { return nil }
            if bytes[index] == UInt8(ascii: "]") { return result }
            guard bytes[index] == UInt8(ascii: ",") else { return nil }
            index += 1
            skipSpace(bytes, &index)
        }
        return nil
    }

    /// Whether `a` in `x` and `b` in `y` hold the same bytes.
    static func equal(_ x: Span<UInt8>, _ a: Range<Int>, _ y: Span<UInt8>, _ b: Range<Int>) -> Bool {
        guard a.count == b.count else { return false }
        var i = a.lowerBound
        var j = b.lowerBound
        while i < a.upperBound {
            if x[i] != y[j] { return false }
            i &+= 1
            j &+= 1
        }
        return true
    }
}

/// Compares two documents' bytes and writes the operations that turn one into the other.
private struct DiffScanner {
    let old: [UInt8]
    let new: [UInt8]

    func equal(_ a: Range<Int>, _ b: Range<Int>) -> Bool {
        Scanner.equal(old.span, a, new.span, b)
    }

    mutating func diff(_ a: Range<Int>, _ b: Range<Int>, path: [UInt8], into writer: inout PatchWriter) {
        if writer.overLimit || equal(a, b) { return }
        let first = old[a.lowerBound]
        if first == new[b.lowerBound] {
            if first == UInt8(ascii: "{"), let from = Scanner.members(old.span, a), let to = Scanner.members(new.span, b) {
                return diffObjects(from, to, path: path, into: &writer)
            }
            if first == UInt8(ascii: "["), let from = Scanner.elements(old.span, a), let to = Scanner.elements(new.span, b) {
                return diffArrays(from, to, path: path, into: &writer)
            }
        }
        writer.op("replace", path: path, value: new[b])
    }

    /// Keys are sorted in both (canonical encoding); a key found on one side only is removed
    /// or added. Unsorted input still gives a correct (if longer) patch: keys are matched by
    /// lookup, not by position.
    mutating func diffObjects(
        _ from: [(key: Range<Int>, value: Range<Int>)], _ to: [(key: Range<Int>, value: Range<Int>)],
        path: [UInt8], into writer: inout PatchWriter
    ) {
        var oldByKey: [ArraySlice<UInt8>: Range<Int>] = [:]
        oldByKey.reserveCapacity(from.count)
        for member in from { oldByKey[old[member.key]] = member.value }
        var seen = Set<ArraySlice<UInt8>>()
        for member in to {
            let key = new[member.key]
            seen.insert(key)
            let childPath = path + [UInt8(ascii: "/")] + Self.pointerToken(key)
            if let oldValue = oldByKey[key] {
                diff(oldValue, member.value, path: childPath, into: &writer)
            } else {
                writer.op("add", path: childPath, value: new[member.value])
            }
            if writer.overLimit { return }
        }
        for member in from where !seen.contains(old[member.key]) {
            writer.op("remove", path: path + [UInt8(ascii: "/")] + Self.pointerToken(old[member.key]), value: nil)
        }
    }

    mutating func diffArrays(_ from: [Range<Int>], _ to: [Range<Int>], path: [UInt8], into writer: inout PatchWriter) {
        var prefix = 0
        while prefix < from.count, prefix < to.count, equal(from[prefix], to[prefix]) { prefix += 1 }
        var suffix = 0
        while suffix < from.count - prefix, suffix < to.count - prefix,
            equal(from[from.count - 1 - suffix], to[to.count - 1 - suffix])
        {
            suffix += 1
        }
        let oldMiddle = from.count - prefix - suffix
        let newMiddle = to.count - prefix - suffix
        let paired = min(oldMiddle, newMiddle)
        for offset in 0..<paired {
            let index = prefix + offset
            diff(from[index], to[index], path: path + [UInt8(ascii: "/")] + Array(String(index).utf8), into: &writer)
            if writer.overLimit { return }
        }
        if oldMiddle > newMiddle {
            // Removing at the same index repeatedly: each removal shifts the rest down.
            let at = path + [UInt8(ascii: "/")] + Array(String(prefix + paired).utf8)
            for _ in 0..<(oldMiddle - newMiddle) {
                writer.op("remove", path: at, value: nil)
                if writer.overLimit { return }
            }
        } else {
            for offset in paired..<newMiddle {
                let index = prefix + offset
                writer.op("add", path: path + [UInt8(ascii: "/")] + Array(String(index).utf8), value: new[to[index]])
                if writer.overLimit { return }
            }
        }
    }

    /// A key (with its quotes, as encoded) as a JSON-pointer token (RFC 6901: `~` → `~0`,
    /// `/` → `~1`), unescaped from JSON.
    static func pointerToken(_ quoted: ArraySlice<UInt8>) -> [UInt8] {
        var raw = Array(quoted.dropFirst().dropLast())
        if raw.contains(UInt8(ascii: "\\")), case .string(let text)? = try? JSONParser.parse(Array(quoted)) {
            raw = Array(text.utf8)
        }
        guard raw.contains(where: { $0 == UInt8(ascii: "~") || $0 == UInt8(ascii: "/") }) else { return raw }
        var token: [UInt8] = []
        token.reserveCapacity(raw.count + 4)
        for byte in raw {
            switch byte {
            case UInt8(ascii: "~"): token += [UInt8(ascii: "~"), UInt8(ascii: "0")]
            case UInt8(ascii: "/"): token += [UInt8(ascii: "~"), UInt8(ascii: "1")]
            default: token.append(byte)
            }
        }
        return token
    }
}

/// Writes `[{"op":...,"path":...,"value":...},...]`, stopping once past its limit.
private struct PatchWriter {
    let limit: Int
    var bytes: [UInt8] = [UInt8(ascii: "[")]
    var overLimit = false

    init(limit: Int) {
        self.limit = limit
    }

    mutating func op(_ name: String, path: [UInt8], value: ArraySlice<UInt8>?) {
        guard !overLimit else { return }
        if bytes.count > 1 { bytes.append(UInt8(ascii: ",")) }
        bytes += Array(#"{"op":""#.utf8)
        bytes += Array(name.utf8)
        bytes += Array(#"","path":"#.utf8)
        JSONCoding.appendString(String(decoding: path, as: UTF8.self), to: &bytes)
        if let value {
            bytes += Array(#","value":"#.utf8)
            bytes += value
        }
        bytes.append(UInt8(ascii: "}"))
        if bytes.count + 1 > limit { overLimit = true }
    }

    func finish() -> [UInt8]? {
        overLimit ? nil : bytes + [UInt8(ascii: "]")]
    }
}
