import Foundation

// The cart's types as swift-openapi-generator made them from CartServer's /openapi.json: a
// state read from JSON the server sent, and a dispatch body written from typed values.
func check(_ condition: Bool, _ what: String) {
    guard condition else {
        FileHandle.standardError.write(Data("swift client check: FAILED: \(what)\n".utf8))
        exit(1)
    }
}

let stateJSON = CommandLine.arguments.count > 1 ? CommandLine.arguments[1] : ""
let state = try JSONDecoder().decode(Components.Schemas.CartState.self, from: Data(stateJSON.utf8))
check(state.lines.first?.product == "apple" && state.lines.first?.quantity == 2, "CartState.lines: \(state)")
check(state.isCheckingOut == false && state.ordersPlaced == 0, "CartState: \(state)")

let body = Components.Schemas.CartDispatch(
    feature: .cart, action: .add(.init(_type: .add, product: "pear", quantity: 3)))
let written = String(decoding: try JSONEncoder().encode(body), as: UTF8.self)
check(written.contains(#""product":"pear""#) && written.contains(#""type":"add""#), "CartDispatch: \(written)")
print("swift client check: the generated CartState and CartDispatch types read and write the cart")
