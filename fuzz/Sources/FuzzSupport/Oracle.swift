import Foundation
import StateStore

/// The bytes libFuzzer hands to `LLVMFuzzerTestOneInput`, copied.
public func inputBytes(_ start: UnsafeRawPointer?, _ count: Int) -> [UInt8] {
    guard let start = start, count > 0 else { return [] }
    return Array(UnsafeRawBufferPointer(start: start, count: count))
}

/// A broken property: says which and traps, so libFuzzer keeps the input as a crash artifact
/// (scripts/fuzz.sh counts it as a finding).
public func finding(_ message: String, file: StaticString = #fileID, line: UInt = #line) -> Never {
    FileHandle.standardError.write(Data("FINDING (\(file):\(line)): \(message)\n".utf8))
    fatalError("fuzz finding: \(message)", file: file, line: line)
}

/// Traps with `message` unless `condition` holds.
public func expect(
    _ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String,
    file: StaticString = #fileID, line: UInt = #line
) {
    if !condition() { finding(message(), file: file, line: line) }
}

/// A value as JSON text for a message, cut at 300 bytes.
public func show(_ value: JSONValue) -> String { show(value.bytes) }

public func show(_ bytes: [UInt8]) -> String {
    let text = String(decoding: bytes.prefix(300), as: UTF8.self)
    return bytes.count > 300 ? text + "… (\(bytes.count) bytes)" : text
}
