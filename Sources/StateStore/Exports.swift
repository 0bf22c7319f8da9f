// The store core speaks JSON through StateJSON (parser, `JSONValue`, its Codable encoder and
// decoder, tagging); users of StateStore get it with one import.
@_exported import StateJSON
