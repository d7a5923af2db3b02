#if Service
import ChorusCommands
import ChorusNode
import ChorusProjections
import ChorusService
import ChorusTestSupport
import Foundation
import Testing

@Suite("the local API served by an app's own node", .closingNodes)
struct LibraryAPITests {
    @Test("without the command line (ChorusService alone), node.serveAPI answers every endpoint (import, export and sync included); only /v1/run is absent")
    func serveAPIWithoutTheCommandLine() async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let node = opened(try await Node.create(at: dir.store("app"), network: NetworkConfig()))
        let serving = try await node.serveAPI()
        let socket = APIClient(.socket(inStore: dir.store("app")))
        let followed = try await socket.send(.POST, "/v1/following/\(String(repeating: "b0", count: 32))")
        #expect(followed.status == 200, "\(followed.text)")
        #expect(try await socket.send(.GET, "/v1/profile").status == 200)
        let export = try await socket.send(.GET, "/v1/export")
        #expect(export.status == 200 && export.body.count > 100, "\(export.text)")
        let imported = try await socket.send(.POST, "/v1/import", body: [1, 2, 3], contentType: "application/octet-stream")
        #expect(imported.status == 400 && imported.text.contains("not_an_event_file"), "\(imported.text)")
        // A sync is typed: with no relay to sync with it says so.
        let sync = try await socket.send(.POST, "/v1/sync", body: Array("{}".utf8), contentType: "application/json")
        #expect(sync.status == 503 && sync.text.contains("no_relays"), "\(sync.text)")
        #expect(try await socket.send(.POST, "/v1/run", body: Array("{}".utf8), contentType: "application/json").status == 404)
        await serving.shutdown()
        await node.close()
    }

    @Test("node.serveAPI serves the REST endpoints, /v1/run and TCP with a token, on the app's open node, and shuts down cleanly")
    func serveAPIFromALibrary() async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let node = opened(try await Node.create(at: dir.store("app"), network: NetworkConfig()))
        let token = String(repeating: "7f", count: 32)
        let serving = try await node.serveAPI(tcp: ("127.0.0.1", 0), token: token, commandLine: ChorusProgram.runner(node: node))
        #expect(serving.endpoints.first == .socket(inStore: dir.store("app")))
        guard case .tcp(_, let port) = try #require(serving.endpoints.last) else {
            Issue.record("no TCP endpoint: \(serving.endpoints)")
            return
        }
        let socket = APIClient(.socket(inStore: dir.store("app")))
        let set = try await socket.send(.POST, "/v1/profile", body: Array(#"{"field":"bio","value":"from the API"}"#.utf8), contentType: "application/json")
        #expect(set.status == 200, "\(set.text)")
        // The app's node itself sees the edit at once.
        #expect(try node.projections.profile(node.identity.user).fields.first { $0.name == "bio" }?.value == .text("from the API"))
        let tcp = try await APIClient(.tcp(host: "127.0.0.1", port: port), token: token).send(.GET, "/v1/profile")
        #expect(tcp.status == 200 && tcp.text.contains("from the API"))
        #expect(try await APIClient(.tcp(host: "127.0.0.1", port: port)).send(.GET, "/v1/profile").status == 401)
        var output = Data()
        let status = try await socket.run(
            CommandRequest(arguments: ["whoami", "--json"], workingDirectory: dir.path), output: { output.append($0) }, error: { _ in })
        #expect(status == 0 && String(decoding: output, as: UTF8.self).contains(node.identity.user.hex))
        let malformed = try await socket.send(.POST, "/v1/run", body: Array("{}".utf8), contentType: "application/json")
        #expect(malformed.status == 400 && malformed.text.contains("arguments"))
        await serving.shutdown()
        #expect(!FileManager.default.fileExists(atPath: APIPaths.socket(inStore: dir.store("app"))))
        await #expect(throws: APIClientError.self) { _ = try await socket.send(.GET, "/health") }
        // The node stays the app's: still open and writable.
        _ = try await node.setProfile(.bio("after the API"))
        await node.close()
    }
}
#endif
