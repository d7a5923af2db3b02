import ChorusCrypto
import Foundation
import Testing

/// Runs `chorus` to completion; the command must succeed. Returns stdout.
@discardableResult
func chorusOK(_ arguments: String...) async throws -> String {
    let p = try ChorusProcess(arguments)
    let status = try await p.waitExit(.seconds(120))
    let out = p.output
    #expect(status == 0, "chorus \(arguments.joined(separator: " ")): \(p.lines.all.joined(separator: "\n"))")
    return out
}

/// Every byte of every file under `directory` (LMDB's data.mdb, blobs, keys).
func storeFiles(_ directory: String) throws -> [(path: String, bytes: Data)] {
    let root = URL(fileURLWithPath: directory)
    guard let walker = FileManager.default.enumerator(at: root, includingPropertiesForKeys: [.isRegularFileKey]) else { return [] }
    var out: [(String, Data)] = []
    for case let url as URL in walker where (try url.resourceValues(forKeys: [.isRegularFileKey])).isRegularFile == true {
        out.append((url.path, try Data(contentsOf: url)))
    }
    return out
}

@Suite("Private chats leave no plaintext outside their members' devices (CLI)", .closingNodes)
struct PlaintextLeakTests {
    @Test func relayAndNonMemberStoresHoldNoPlaintextWhileMembersReadEverything() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let relay = dir.store("relay"), alice = dir.store("alice"), bob = dir.store("bob"), carol = dir.store("carol")
        try await chorusOK("init", "--store", relay, "--name", "Relay")
        let network = relay + "/network.json"
        for (store, name) in [(alice, "Alice"), (bob, "Bob"), (carol, "Carol")] {
            try await chorusOK("init", "--store", store, "--name", name, "--network", network)
        }
        let (server, port) = try await ChorusProcess.serve(store: relay)
        defer { server.kill() }
        let address = "127.0.0.1:\(port)"
        func user(_ store: String) async throws -> String {
            let json = try await chorusOK("whoami", "--store", store, "--json")
            let object = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
            return try #require(object["user"] as? String)
        }
        // Everyone meets at the relay; Carol follows both, so --hops covers them.
        for s in [alice, bob, carol] { try await chorusOK("sync", "--store", s, address) }
        try await chorusOK("follow", "--store", carol, try await user(alice))
        try await chorusOK("follow", "--store", carol, try await user(bob))

        let secretText = "my bank PIN is 4321"
        let secretTitle = "Bob and Alice, privately"
        // A picture with a recognisable 64-byte run in the middle.
        var image: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE0] + Array(repeating: 0x11, count: 60)
        let marker = Array("PICTURE-BYTES-THAT-MUST-NEVER-LEAVE-THE-MEMBERS-DEVICES-0123456".utf8)
        image += marker + Array(repeating: 0x22, count: 200)
        let imageFile = dir.store("photo.jpg")
        try Data(image).write(to: URL(fileURLWithPath: imageFile))

        let chat = try await chorusOK("chat", "create", "--store", bob, "--title", secretTitle, "--member", try await user(alice))
            .trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "\n").first.map(String.init) ?? ""
        try await chorusOK("chat", "send", "--store", bob, chat, "--text", secretText)
        try await chorusOK("chat", "send", "--store", bob, chat, "--image", imageFile, "--text", "the view")
        try await chorusOK("sync", "--store", bob, address)
        try await chorusOK("sync", "--store", alice, address)
        try await chorusOK("chat", "send", "--store", alice, chat, "--text", "got it: \(secretText)")
        // Every feed (no --hops), then with --hops 3, for everyone.
        for s in [alice, bob, carol] { try await chorusOK("sync", "--store", s, address) }
        for s in [alice, bob, carol] { try await chorusOK("sync", "--store", s, address, "--hops", "3") }

        // The members read text, title and picture.
        for member in [alice, bob] {
            let page = try await chorusOK("query", "chat", "--store", member, chat)
            #expect(page.contains(secretText) && page.contains(secretTitle), "\(page)")
            let json = try await chorusOK("query", "chat", "--store", member, chat, "--json")
            #expect(json.contains("image/jpeg"), "\(json)")
        }
        let picture = dir.store("out.jpg")
        let messages = try await chorusOK("query", "chat", "--store", alice, chat, "--json")
        let page = try #require(try JSONSerialization.jsonObject(with: Data(messages.utf8)) as? [String: Any])
        let withImage = try #require((page["messages"] as? [[String: Any]])?.first { $0["attachment"] is [String: Any] })
        try await chorusOK("chat", "attachment", "--store", alice, try #require(withImage["id"] as? String), "--output", picture)
        #expect(try Data(contentsOf: URL(fileURLWithPath: picture)) == Data(image))
        // Decrypted, it is its owner's alone.
        #expect(try FileManager.default.attributesOfItem(atPath: picture)[.posixPermissions] as? Int == 0o600)

        // Carol and the relay hold every event of the chat ...
        for other in [relay, carol] {
            let json = try await chorusOK("query", "chat", "--store", other, chat, "--json")
            let view = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
            #expect((view["messages"] as? [[String: Any]])?.count == 3, "\(json)")
            #expect(!json.contains(secretText) && !json.contains(secretTitle))
            let log = try await chorusOK("log", "--store", other, "--json")
            #expect(!log.contains(secretText) && !log.contains(secretTitle))
        }
        // ... and no byte of their store files gives any secret away.
        _ = try await chorusOK("query", "digest", "--store", relay)  // the relay's store is settled
        for other in [relay, carol] {
            let files = try storeFiles(other)
            #expect(files.contains { $0.path.hasSuffix("data.mdb") })
            for (path, bytes) in files {
                for secret in [Array(secretText.utf8), Array(secretTitle.utf8), marker] {
                    #expect(bytes.range(of: Data(secret)) == nil, "\(path) holds \(String(decoding: secret, as: UTF8.self))")
                }
            }
        }
        // The members' own stores hold ciphertext too: plaintext exists only in memory.
        for member in [alice, bob] {
            for (path, bytes) in try storeFiles(member) {
                #expect(bytes.range(of: Data(secretText.utf8)) == nil, "\(path)")
            }
        }
        server.kill()
        _ = try await server.waitExit()
    }
}
