import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections
import ChorusTestSupport
import Foundation
import Testing

@Suite("Projections: basics through the node API", .closingNodes)
struct SmokeTests {
    @Test func profilePictureChatCoinsOnOneNode() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("chorus-smoke-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let issuerNode = opened(try await Node.create(at: dir + "/issuer", network: NetworkConfig()))
        await issuerNode.close()
        let issuer = try Node.createIssuer(at: dir + "/issuer")
        let network = NetworkConfig(issuers: [issuer])
        let a = opened(try await Node.create(at: dir + "/a", deviceName: "phone", network: network))
        let me = a.identity.user
        try await a.setProfile(.name, .text("Alice"))
        let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13] + Array("IHDR".utf8) + [0, 0, 0, 4, 0, 0, 0, 3, 8]
        let p1 = try await a.addPicture(png, caption: "one").object
        let p2 = try await a.addPicture(png + [1], caption: "two").object
        try await a.setProfile(.avatar, .bytes(p1.bytes))
        #expect(try a.projections.pictures(of: me).map(\.id) == [p1, p2])
        try await a.movePicture(p2, to: .first)
        #expect(try a.projections.pictures(of: me).map(\.id) == [p2, p1])
        guard case .picture(let avatar)? = try a.projections.profile(me).avatar else {
            Issue.record("avatar not resolved")
            return
        }
        #expect(avatar.id == p1 && avatar.width == 4 && avatar.height == 3)
        let chat = try await a.createChat(title: "hello").object
        let m = try await a.sendMessage(chat, text: "hi", picture: p1).object
        try await a.deletePicture(p1)
        guard case .removed? = try a.projections.profile(me).avatar else {
            Issue.record("avatar still shows a deleted picture")
            return
        }
        let page = try a.projections.chat(chat)
        #expect(page.messages.map(\.id) == [m])
        #expect(try a.readableChatPage(chat).messages.first?.picture == .removed(p1))
        #expect(try a.readableChatPage(chat).messages.first?.content.value?.text == "hi")
        let blob = Blake2b.hash256(png)
        #expect(try a.blobs.read(blob) == nil)
        await a.close()

        let i = opened(try await Node.open(at: dir + "/issuer"))
        #expect(i.identity.issuer == issuer)
        let aReader = opened(try await Node.open(at: dir + "/a", readOnly: true))
        let aEvents = try aReader.arrivals().map { $0.event.encoded() }
        _ = await i.ingest(aEvents)
        try await i.creditCoins(100, to: me, receipt: "tx-1")
        try await i.creditCoins(100, to: me, receipt: "tx-1")
        #expect(try i.projections.balance(of: me).total == 100)
        await i.close()
    }
}
