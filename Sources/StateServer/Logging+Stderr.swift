import Configuration
import Dispatch
import Foundation
import Logging
import Synchronization

/// Writes log lines to standard error from a background queue, so a slow or blocked reader of
/// stderr never stalls the server: past `maxPending` lines waiting, new lines are dropped and
/// counted (the count is reported in the next line written).
final class StderrLogWriter: Sendable {
    static let shared = StderrLogWriter()

    private let queue = DispatchQueue(label: "state-server.log")
    private let pending = Atomic<Int>(0)
    private let dropped = Atomic<Int>(0)
    private let maxPending = 10_000

    func write(_ line: String) {
        guard pending.add(1, ordering: .relaxed).newValue <= maxPending else {
            pending.subtract(1, ordering: .relaxed)
            dropped.add(1, ordering: .relaxed)
            return
        }
        queue.async { [self] in
            var text = line
            let lost = dropped.exchange(0, ordering: .relaxed)
            if lost > 0 { text = "(\(lost) log lines dropped: stderr was not being read)\n" + text }
            var bytes = Array(text.utf8)
            bytes.append(10)
            bytes.withUnsafeBytes { raw in
                var offset = 0
                while offset < raw.count, let base = raw.baseAddress {
                    let written = Foundation.write(2, base + offset, raw.count - offset)
                    if written <= 0 { break }
                    offset += written
                }
            }
            pending.subtract(1, ordering: .relaxed)
        }
    }

    /// Waits until every queued line is written (at exit).
    func flush() {
        queue.sync {}
    }
}

/// A swift-log handler printing one line per message, as text (`key=value` metadata) or as a
/// JSON object.
struct StderrLogHandler: LogHandler {
    enum Format: String, SettingChoice {
        /// `key=value` metadata.
        case text
        /// One JSON object per line.
        case json
    }

    let label: String
    let format: Format
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var all = metadata
        if let extra = event.metadata { all.merge(extra) { _, new in new } }
        let time = Date.ISO8601FormatStyle(includingFractionalSeconds: true).format(Date())
        switch format {
        case .text:
            // Control characters are escaped as the JSON format escapes them (`\u001b`, `\r`), so
            // a value from a request (a method with CR or ESC) cannot forge or hide a log line.
            var line = "\(time) \(event.level) \(Self.escaped("\(event.message)"))"
            for (key, value) in all.sorted(by: { $0.key < $1.key }) { line += " \(Self.escaped(key))=\(Self.escaped("\(value)"))" }
            StderrLogWriter.shared.write(line)
        case .json:
            var object: [String: String] = ["time": time, "level": "\(event.level)", "message": "\(event.message)", "logger": label]
            for (key, value) in all { object[key] = "\(value)" }
            let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data()
            StderrLogWriter.shared.write(String(decoding: data, as: UTF8.self))
        }
    }
}

extension StderrLogHandler {
    /// `text` with its control characters (U+0000-U+001F, U+007F) escaped as in JSON
    /// (`\n`, `\r`, `\t`, `\u001b`, ...) and a backslash doubled; the text unchanged (no copy
    /// made) when it has none.
    static func escaped(_ text: String) -> String {
        guard text.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F || $0 == UInt8(ascii: "\\") }) else { return text }
        var out = ""
        out.reserveCapacity(text.utf8.count + 8)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "\\": out += "\\\\"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}

extension Logger.Level: SettingChoice {}

/// Logging.
///
/// | key | type | default |
/// | --- | --- | --- |
/// | `log.level` | trace…critical | `info` |
/// | `log.format` | `text` or `json` | `text` |
/// | `log.audit` | `true` or `false` | `false` |
struct LogSettings: Sendable {
    static let level = Setting("log.level", default: Logger.Level.info, "trace ... critical")
    static let format = Setting("log.format", default: StderrLogHandler.Format.text, "text or json")
    static let audit = Setting("log.audit", default: false, "log each dispatch (true/false)")

    var level: Logger.Level
    var format: StderrLogHandler.Format
    /// An `audit` line per client dispatch (``AuditLog``).
    var audit: Bool

    init(_ read: inout SettingsReader) throws(SettingsError) {
        level = try read(Self.level)
        format = try read(Self.format)
        audit = try read(Self.audit)
    }

    /// Sends every logger's lines to standard error (once per process).
    func bootstrap() {
        let (level, format) = (level, format)
        LoggingSystem.bootstrap { label in StderrLogHandler(label: label, format: format, logLevel: level) }
    }
}
