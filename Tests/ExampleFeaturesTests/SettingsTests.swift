import ExampleFeatures
import StateStore
import StateStoreTesting
import Testing

@Suite("settings")
struct SettingsTests {
    @Test func coloursAreStoredUpperCase() {
        let store = TestStore(SettingsFeature())
        store.send(.setBackgroundColor(color: "#00ff7f")) { $0.backgroundColor = "#00FF7F" }
        store.send(.setTextColor(color: "#AbCdEf")) { $0.textColor = "#ABCDEF" }
        store.send(.setTextColor(color: "#123456")) { $0.textColor = "#123456" }
        store.send(.setBackgroundColor(color: "#FF0000")) { $0.backgroundColor = "#FF0000" }
        store.finish()
    }

    @Test func theWireShape() throws {
        let store = TestStore(SettingsFeature())
        #expect(text(try store.store.currentJSON().state) == ##"{"backgroundColor":"#FF0000","textColor":"#FFFFFF"}"##)
        let change = store.send(json: ##"{"type":"setBackgroundColor","color":"#0a0b0c"}"##) {
            $0.backgroundColor = "#0A0B0C"
        }
        #expect(text(change?.action) == ##"{"color":"#0a0b0c","type":"setBackgroundColor"}"##)
        #expect(text(change?.state) == ##"{"backgroundColor":"#0A0B0C","textColor":"#FFFFFF"}"##)
        store.send(json: ##"{"type":"setTextColor","color":"#000000"}"##) { $0.textColor = "#000000" }
        store.sendRejected(json: ##"{"type":"setTextColor","color":"black"}"##)
        store.finish()
    }

    @Test(arguments: [
        "", "#", "red", "FF0000", "#FFF", "#FF000", "#FF00000", "#GG0000", "#FF 000", " #FF0000", "#FF0000 ",
        "##FF000", "0xFF0000", "#ＦＦ0000", "#FF000\u{0301}", "#-10000", "#+F0000",
    ])
    func aColourMustBeHashAndSixHexDigits(color: String) {
        let store = TestStore(SettingsFeature())
        let message = store.sendRejected(.setBackgroundColor(color: color))
        #expect(message?.contains("#RRGGBB") == true)
        store.sendRejected(.setTextColor(color: color))
        store.finish()
    }

    @Test func aLongInvalidColourIsNotEchoedInFull() {
        let store = TestStore(SettingsFeature())
        let message = store.sendRejected(.setTextColor(color: String(repeating: "#", count: 10_000)))
        #expect((message?.count ?? .max) < 200)
        store.finish()
    }
}
