import ArgumentParser
import CTerminationSignals
import Foundation
import StateStore

/// `state-server replay FILE`: runs a recording (`GET /v1/sessions/{id}/recording`) through
/// this build's reducers, offline, and prints the first step whose state differs — feature,
/// step, action, and recorded vs replayed as a JSON Patch. Exit 0 when every state is the same,
/// 1 on a divergence, 2 when the file cannot be read as a recording.
struct ReplayCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay",
        abstract: "Replay a recording through this server's reducers; exit 1 at the first state that differs.")

    @Argument(help: "A recording: the JSON of GET /v1/sessions/{id}/recording.")
    var file: String

    func run() throws {
        _ = ss_install_fatal_signal_handlers()
        let bytes: [UInt8]
        do {
            bytes = Array(try Data(contentsOf: URL(fileURLWithPath: file)))
        } catch {
            FileHandle.standardError.write(Data("replay: cannot read \(file): \(error.localizedDescription)\n".utf8))
            throw ExitCode(2)
        }
        let divergence: Recording.Divergence?
        let recording: Recording
        do throws(Recording.Unreadable) {
            recording = try Recording(json: bytes)
            // Recorded follow-ups are applied as recorded: no asynchronous work runs offline.
            let registry: FeatureRegistry
            do {
                registry = try HostedFeatures.registry(FeatureSettings())
            } catch {
                throw Recording.Unreadable(description: "the features cannot be registered: \(error)")
            }
            divergence = try recording.replay(with: registry)
        } catch {
            FileHandle.standardError.write(Data("replay: \(file) is not a recording this server reads: \(error)\n".utf8))
            throw ExitCode(2)
        }
        if let divergence {
            print("replay: \(file) diverges at \(divergence)")
            throw ExitCode(1)
        }
        print("replay: \(file): \(recording.changes.count) changes of \(recording.features.count) features, every state the same")
    }
}
