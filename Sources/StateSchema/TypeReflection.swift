import CTypeReflection

/// The case names of an enum, read from the Swift runtime's type metadata by the C target
/// `CTypeReflection` (the only unsafe code of schema derivation). Used for the `CodingKeys` of
/// an enum's synthesized `Codable`, which Swift cannot list: no `CaseIterable`, and
/// `init(intValue:)` answers `nil`.
enum TypeReflection {
    /// The names of `type`'s cases in declaration order, or `nil` when `type` is not an enum.
    static func caseNames(of type: Any.Type) -> [String]? {
        let address = UInt(bitPattern: ObjectIdentifier(type))
        let count = stateserver_enum_case_count(address)
        guard count >= 0 else { return nil }
        var names: [String] = []
        for index in 0..<count {
            var bytes: [UInt8] = []
            var offset: Int32 = 0
            while bytes.count < 1024 {
                let byte = stateserver_enum_case_name_byte(address, index, offset)
                guard byte > 0 else {
                    if byte < 0 { return nil }
                    break
                }
                bytes.append(UInt8(byte))
                offset += 1
            }
            names.append(String(decoding: bytes, as: UTF8.self))
        }
        return names
    }
}
