import Chorus
import ChorusTestSupport
import Foundation
import Synchronization
import Testing

/// Every error an app meets carries a stable code (`ChorusError`).
@Suite("Errors an app branches on", .closingNodes)
struct ErrorTests {
    static func code(_ body: () async throws -> Void) async -> String? {
        do {
            try await body()
            return nil
        } catch let error as any ChorusError {
            return error.code
        } catch {
            return "not a ChorusError: \(error)"
        }
    }

    @Test("refusals, a missing store, a store open twice and a closed node each throw a ChorusError with its code")
    func codes() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("chorus-errors-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let store = root.appendingPathComponent("a")
        #expect(await Self.code { _ = opened(try await Node.open(at: root.appendingPathComponent("none"))) } == "not_initialized")
        let node = opened(try await Node.create(at: store, deviceName: "phone", network: NetworkConfig()))
        #expect(await Self.code { try await node.spendCoins(30, for: "a gift") } == "beyond_rights")
        #expect(await Self.code { try await node.follow(node.identity.user) } == "self")
        #expect(await Self.code { try await node.unlockSlot(99) } == "no_such_slot")
        // A second follow or like would change nothing: not written, and said so.
        let someone = UserID(SigningKey.generate().publicKey)
        _ = try await node.follow(someone)
        let events = try node.log.eventCount()
        #expect(await Self.code { try await node.follow(someone) } == "already_added")
        #expect(try node.log.eventCount() == events)
        _ = try await node.unfollow(someone)
        _ = try await node.follow(someone)
        #expect(await Self.code { _ = try await node.createChat(title: String(repeating: "t", count: 201)) } == "title_length")
        let chat = try await node.createChat(title: "ok").object
        #expect(await Self.code { _ = try await node.sendMessage(chat, text: "") } == "text_length")
        #expect(await Self.code { _ = try await node.sendMessage(chat, text: String(repeating: "x", count: 4001)) } == "text_length")
        #expect(await Self.code { _ = try await node.addPicture(Data("not an image".utf8)) } == "not_an_image")
        #expect(await Self.code { _ = opened(try await Node.open(at: store)) } == "already_open_in_process")
        await node.close()
        #expect(await Self.code { try await node.setProfile(.city("Lisbon")) } == "closed")
        // One error for a closed node, whatever the call, nameable with `import Chorus`.
        await #expect(throws: StorageError.closed) { try await node.setProfile(.city("Lisbon")) }
        #expect(throws: StorageError.closed) { _ = try node.profile(of: node.identity.user) }
        await #expect(throws: StorageError.closed) { _ = try await node.follow(someone) }
        #expect(await Self.code { _ = opened(try await Node.create(at: store, network: NetworkConfig())) } == "already_initialized")
        let refusal: any ChorusError = Refusal.insufficientRights(held: 0, needed: 30)
        #expect(refusal.code == "beyond_rights" && refusal.message.contains("30"))
    }
}

/// Pictures in and out as `Data`, with their ids typed.
/// An app learns an error's code from its documentation, not by running
/// into it: each case's doc comment names the code its `code` property
/// gives, read from the sources so a new case cannot leave it out.
@Suite("Error codes in the documentation")
struct ErrorCodeDocumentationTests {
    @Test("every case of every error type an app can catch names its code in its doc comment", arguments: [
        ("Sources/ChorusNode/Refusal.swift", "Refusal"), ("Sources/ChorusNode/NodeError.swift", "NodeError"),
        ("Sources/ChorusSync/SyncError.swift", "SyncError"), ("Sources/ChorusStorage/Environment.swift", "StorageError"),
        ("Sources/ChorusLog/LogStore.swift", "LogError"), ("Sources/ChorusBlobs/BlobStore.swift", "BlobError"),
        ("Sources/ChorusProjections/NetworkConfig.swift", "NetworkConfigError"),
    ])
    func everyCaseNamesItsCode(file: String, type: String) throws {
        let source = try String(contentsOf: repositoryRoot.appendingPathComponent(file), encoding: .utf8)
        let lines = source.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        // The type's own cases: from its declaration to its closing brace.
        guard let declaration = lines.firstIndex(where: { $0.hasPrefix("public enum \(type):") }),
            let close = lines[declaration...].firstIndex(of: "}")
        else {
            Issue.record("\(file) declares no `public enum \(type)`")
            return
        }
        // The `code` switch: `case .a, .b: "code"` (a refusal's own code excepted).
        guard let start = lines.firstIndex(where: { $0.contains("public var code: String {") }) else {
            Issue.record("\(file) has no `code` property")
            return
        }
        var codes: [String: String] = [:]
        for line in lines[start...].prefix(while: { $0 != "    }" }) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            guard trimmed.hasPrefix("case ."), let colon = trimmed.range(of: ": \""), trimmed.hasSuffix("\"") else { continue }
            let code = String(trimmed[colon.upperBound...].dropLast())
            for name in trimmed[..<colon.lowerBound].split(separator: ",") {
                let bare = name.trimmingCharacters(in: .whitespaces).dropFirst(name.hasPrefix("case") ? 6 : 1)
                codes[String(bare.prefix { $0.isLetter || $0.isNumber })] = code
            }
        }
        #expect(codes.count >= 3, "\(file): read \(codes.count) codes")
        var checked = 0
        for i in declaration..<close {
            let line = lines[i]
            guard line.hasPrefix("    case "), let name = line.dropFirst(9).split(whereSeparator: { !$0.isLetter && !$0.isNumber }).first,
                let code = codes[String(name)]
            else { continue }
            let doc = lines[..<i].reversed().prefix { $0.trimmingCharacters(in: .whitespaces).hasPrefix("///") }.joined(separator: " ")
            #expect(doc.contains("`\(code)`"), "\(file): the doc comment of case \(name) does not name its code `\(code)`")
            checked += 1
        }
        #expect(checked == codes.count, "\(file): \(checked) cases checked, \(codes.count) codes")
    }
}

@Suite("Picture bytes through the library", .closingNodes)
struct PictureDataTests {
    @Test("a relay list is published and read back through import Chorus alone; an invalid one throws invalid_relay_list")
    func relayLists() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("chorus-relays-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let node = opened(try await Node.create(at: root.appendingPathComponent("a"), deviceName: "phone", network: NetworkConfig()))
        let relay = Relay(address: "relay1.example.org:7800", key: SigningKey.generate().publicKey, roles: [.home, .inbox])
        let inbox = Relay(address: "[2001:db8::7]:7801", key: SigningKey.generate().publicKey, roles: .inbox)
        #expect(try node.relays(of: node.identity.user) == nil)
        let set = try await node.setRelays([relay, inbox])
        #expect(set.effect == .applied)
        #expect(try node.relays(of: node.identity.user)?.relays == [relay, inbox])
        #expect(await ErrorTests.code { try await node.setRelays([relay, relay]) } == "invalid_relay_list")
        #expect(await ErrorTests.code { try await node.setRelays([Relay(address: "no-port", key: relay.key, roles: .home)]) } == "invalid_relay_list")
        #expect(await ErrorTests.code { try await node.setRelays(Array(repeating: inbox, count: 9)) } == "invalid_relay_list")
        _ = try await node.setRelays([])
        #expect(try node.relays(of: node.identity.user)?.relays == [])
        await node.close()
    }

    @Test("a picture's bytes read back as Data; a deleted one and an unknown one throw their codes; a chat image round-trips")
    func pictureData() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("chorus-data-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let node = opened(try await Node.create(at: root.appendingPathComponent("a"), deviceName: "phone", network: NetworkConfig()))
        let photo = Data([0xFF, 0xD8, 0xFF, 0xE0] + Array(repeating: 9, count: 40))
        let kept = try await node.addPicture(photo).object
        let gone = try await node.addPicture(photo + Data([1])).object
        #expect(try await node.pictureData(kept) == photo)
        try await node.deletePicture(gone)
        #expect(await ErrorTests.code { _ = try await node.pictureData(gone) } == "after_deletion")
        #expect(await ErrorTests.code { _ = try await node.pictureData(PictureID(Bytes32.zero)) } == "picture_unknown")

        let chat = try await node.createChat(title: "notes").object
        let sent = try await node.sendMessage(chat, text: "a photo", image: photo).object
        let opened = try #require(try await node.attachmentData(of: sent))
        #expect(opened.data == photo && opened.attachment.mime == "image/jpeg")
        await node.close()
    }

    @MainActor
    @Test("picture and attachment bytes are read off the main thread when asked for on the main actor")
    func bytesAreReadOffTheMainThread() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("chorus-main-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let node = opened(try await Node.create(at: root.appendingPathComponent("a"), deviceName: "phone", network: NetworkConfig()))
        let photo = Data([0xFF, 0xD8, 0xFF, 0xE0] + (0..<(2 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let picture = try await node.addPicture(photo).object
        let chat = try await node.createChat(title: "notes").object
        let sent = try await node.sendMessage(chat, text: "a photo", image: photo).object
        let before = mainThreadByteReads.load(ordering: .relaxed)
        for _ in 0..<3 {
            #expect(try await node.pictureData(picture) == photo)
            #expect(try await node.attachmentData(of: sent)?.data == photo)
        }
        #expect(mainThreadByteReads.load(ordering: .relaxed) == before, "a byte read ran on the main thread")
        await node.close()
    }
}
