import MicroHTTP
import StateSessions

/// An `If-Match` or `If-None-Match` condition: `*`, or the entity tags listed over every line
/// of the header (RFC 9110 §5.3: repeated lines form one list). Tags are compared by
/// characters: `"08"` is not the tag of version 8.
enum EntityTagCondition: Equatable {
    case any
    case tags(Set<String>)

    /// - Parameter weak: whether weak tags (`W/"3"`) count: yes for `If-None-Match` (weak
    ///   comparison), no for `If-Match` (strong comparison, RFC 9110 §13.1.1).
    init?(_ request: HTTPRequest, _ name: String, weak: Bool) {
        let lines = request.headers.filter { $0.name == name }
        guard !lines.isEmpty else { return nil }
        var tags = Set<String>()
        for line in lines {
            for part in line.value.split(separator: ",") {
                var tag = Substring(part.trimmingWhitespace())
                if tag == "*" {
                    self = .any
                    return
                }
                if tag.hasPrefix("W/") {
                    guard weak else { continue }
                    tag = tag.dropFirst(2)
                }
                guard tag.utf8.count >= 2, tag.hasPrefix("\""), tag.hasSuffix("\"") else { continue }
                tags.insert(String(tag.dropFirst().dropLast()))
            }
        }
        self = .tags(tags)
    }

    func matches(_ version: Int) -> Bool {
        switch self {
        case .any: true
        case .tags(let tags): tags.contains(String(version))
        }
    }

    /// `If-Match` as the version a change requires: none (absent or `*`), one version, or
    /// a condition no single version satisfies atomically (several tags, weak or foreign tags).
    static func precondition(_ request: HTTPRequest) -> VersionPrecondition {
        switch EntityTagCondition(request, "if-match", weak: false) {
        case nil, .any?: return .none
        case .tags(let tags)?:
            guard tags.count == 1, let tag = tags.first, let version = Int(tag), String(version) == tag else {
                return .never
            }
            return .version(version)
        }
    }
}
