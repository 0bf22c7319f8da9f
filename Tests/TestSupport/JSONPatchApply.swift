import Foundation

/// RFC 6902 applied to the tests' own ``JSON`` type, independently of the server's
/// `StateJSON.JSONPatch`: a test that applies the server's patches with the server's code could
/// not see a mistake both sides share.
extension JSON {
    package struct PatchFailure: Error, CustomStringConvertible {
        package let description: String
    }

    /// This value with `patch` (a JSON array of operations) applied in order.
    package func applying(patch: JSON) throws -> JSON {
        guard case .array(let operations) = patch else { throw PatchFailure(description: "a patch is an array: \(patch)") }
        var result = self
        for operation in operations {
            guard let op = operation["op"]?.string, let path = operation["path"]?.string else {
                throw PatchFailure(description: "an operation needs 'op' and 'path': \(operation)")
            }
            let tokens = try JSON.pointer(path)
            switch op {
            case "add", "replace":
                guard let value = operation["value"] else { throw PatchFailure(description: "'\(op)' without a value") }
                try result.edit(tokens[...], op: op, value: value)
            case "remove":
                try result.edit(tokens[...], op: op, value: nil)
            case "test":
                guard try result.read(tokens[...]) == operation["value"] else { throw PatchFailure(description: "test failed at \(path)") }
            default:
                throw PatchFailure(description: "the tests do not apply '\(op)'")
            }
        }
        return result
    }

    private static func pointer(_ text: String) throws -> [String] {
        if text.isEmpty { return [] }
        guard text.hasPrefix("/") else { throw PatchFailure(description: "a pointer starts with '/': \(text)") }
        return text.dropFirst().split(separator: "/", omittingEmptySubsequences: false).map {
            $0.replacingOccurrences(of: "~1", with: "/").replacingOccurrences(of: "~0", with: "~")
        }
    }

    private func read(_ path: ArraySlice<String>) throws -> JSON {
        guard let token = path.first else { return self }
        switch self {
        case .object(let fields):
            guard let child = fields[token] else { throw PatchFailure(description: "no member '\(token)'") }
            return try child.read(path.dropFirst())
        case .array(let items):
            guard let index = Int(token), items.indices.contains(index) else { throw PatchFailure(description: "no element '\(token)'") }
            return try items[index].read(path.dropFirst())
        default:
            throw PatchFailure(description: "'\(token)' inside a scalar")
        }
    }

    private mutating func edit(_ path: ArraySlice<String>, op: String, value: JSON?) throws {
        guard let token = path.first else {
            guard op == "add" || op == "replace", let value else { throw PatchFailure(description: "cannot remove the root") }
            self = value
            return
        }
        let last = path.count == 1
        switch self {
        case .object(var fields):
            if last {
                if op != "add", fields[token] == nil { throw PatchFailure(description: "\(op): no member '\(token)'") }
                fields[token] = op == "remove" ? nil : value
            } else {
                guard var child = fields[token] else { throw PatchFailure(description: "no member '\(token)'") }
                try child.edit(path.dropFirst(), op: op, value: value)
                fields[token] = child
            }
            self = .object(fields)
        case .array(var items):
            if last, op == "add" {
                let index = token == "-" ? items.count : Int(token) ?? -1
                guard (0...items.count).contains(index), let value else { throw PatchFailure(description: "add: bad index '\(token)'") }
                items.insert(value, at: index)
            } else {
                guard let index = Int(token), items.indices.contains(index) else { throw PatchFailure(description: "\(op): no element '\(token)'") }
                if !last {
                    try items[index].edit(path.dropFirst(), op: op, value: value)
                } else if op == "remove" {
                    items.remove(at: index)
                } else if let value {
                    items[index] = value
                }
            }
            self = .array(items)
        default:
            throw PatchFailure(description: "'\(token)' inside a scalar")
        }
    }
}
