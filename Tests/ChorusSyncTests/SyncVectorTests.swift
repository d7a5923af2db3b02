import ChorusCrypto
import ChorusSync
import ChorusTestSupport
import Foundation
import Testing

/// Specs/vectors/sync.json: the exact bytes of every message type.
/// Regenerate (after a deliberate protocol change only) with
/// CHORUS_WRITE_SYNC_VECTORS=1 swift test --traits Service --filter SyncVectorTests.
@Suite("Sync message vectors", .closingNodes)
struct SyncVectorTests {
    static func k(_ byte: UInt8) -> Bytes32 { Bytes32([UInt8](repeating: byte, count: 32))! }

    static let messages: [(String, SyncMessage)] = [
        ("hello", .hello(SyncHello(user: k(0x11), capabilities: [.live, .blobs, .refill], hops: nil, since: 0))),
        ("hello_hops", .hello(SyncHello(user: k(0x11), capabilities: [.blobs], hops: 2, since: 1234))),
        ("have", .have([FeedAnnouncement(author: k(0x22), seq: 7, head: k(0x33)), FeedAnnouncement(author: k(0x44), seq: 300, head: k(0x55))])),
        ("have_end", .haveEnd(position: 65_536)),
        ("want", .want([FeedRange(author: k(0x22), from: 1, prev: nil, to: 7), FeedRange(author: k(0x44), from: 25, prev: k(0x66), to: 300)])),
        ("want_end", .wantEnd),
        ("events", .events([[0x83, 0x41, 0x00, 0x41, 0x01, 0xf6], [0x01, 0x02]])),
        ("ack", .ack(1)),
        ("events_end", .eventsEnd),
        ("blob_want", .blobWant([k(0x77)])),
        ("blob_want_end", .blobWantEnd),
        ("blob_data", .blobData(hash: k(0x77), offset: 65_536, total: 100_000, bytes: [0xde, 0xad, 0xbe, 0xef])),
        ("blob_missing", .blobMissing(k(0x88))),
        ("blob_end", .blobEnd),
        ("done", .done(position: 42)),
        ("error", .error(code: "bad_event", message: "peer sent an invalid event")),
        ("payload_want", .payloadWant([k(0x99)])),
        ("payload_want_end", .payloadWantEnd),
        ("hello_invitations", .hello(SyncHello(user: k(0x11), capabilities: [.blobs, .refill, .invitations], hops: 1, since: 0))),
        ("invite", .invite([k(0x22), k(0x44)])),
        ("hello_blob_serial", .hello(SyncHello(user: k(0x11), capabilities: [.blobs, .refill, .blobSerial], hops: nil, since: 0))),
        ("blob_serial", .blobSerial(70_000)),
        ("hello_reconcile", .hello(SyncHello(user: k(0x11), capabilities: [.blobs, .refill, .blobSerial, .reconcile], hops: nil, since: 0))),
        (
            "reconcile",
            .reconcile(
                ReconcileRound(
                    count: 10_000,
                    splits: [ReconcileSplit(prefix: [0x0a, 0x03], fingerprints: Array(0..<128))],
                    leaves: [
                        ReconcileLeaf(prefix: [0x01, 0x0f, 0x00], digests: Array(repeating: 0xab, count: 8) + Array(repeating: 0xcd, count: 8)),
                        ReconcileLeaf(prefix: [0x02, 0x02, 0x02], digests: nil),
                    ]))
        ),
        ("hello_sketch", .hello(SyncHello(user: k(0x11), capabilities: [.blobs, .refill, .blobSerial, .reconcile, .sketch], hops: nil, since: 0))),
        ("sketch_info", .sketchInfo(SketchInfo(count: 10_000, total: 100_000, setHash: Array(0..<16), nonce: Array(16..<32)))),
        ("sketch", .sketch(SketchSums(checksum: 0x0123_4567_89AB_CDEF, sums: [1, 0xFFFF_FFFF_FFFF_FFFF, 0x8000_0000_0000_0000]))),
        ("sketch_result_more", .sketchResult(SketchResult(outcome: .more))),
        ("sketch_result_found", .sketchResult(SketchResult(outcome: .found, asks: [0xDEAD_BEEF_0000_0001, 7], push: 100))),
        ("sketch_result_give_up", .sketchResult(SketchResult(outcome: .giveUp))),
        (
            "hello_scoped",
            .hello(SyncHello(user: k(0x11), capabilities: [.blobs, .refill, .invitations, .blobSerial, .reconcile, .sketch, .scoped], hops: 1, since: 0))
        ),
        ("scope", .scope([k(0x22), k(0x44)])),
        ("scope_end", .scopeEnd),
        ("scope_answered", .scopeAnswered),
        ("hello_inbox", .hello(SyncHello(user: k(0x11), capabilities: [.blobs, .refill, .invitations, .blobSerial, .scoped, .inbox], hops: 1, since: 0))),
        ("inbox", .inbox(since: 300)),
        ("deliver", .deliver([[0x83, 0x41, 0x00, 0x41, 0x01, 0xf6]])),
        ("deliver_end", .deliverEnd),
        ("notices", .notices([Notice(user: k(0x22), envelope: [0x83, 0x41, 0x00, 0x41, 0x01, 0xf6]), Notice(user: nil, envelope: [0x01, 0x02])])),
        ("inbox_end", .inboxEnd(serial: 301, kept: 2)),
        ("hello_directory", .hello(SyncHello(user: k(0x11), capabilities: [.refill, .invitations, .reconcile, .scoped, .directory], hops: nil, since: 0))),
    ]

    static var vectorPath: String {
        specVector("sync.json").path
    }

    @Test("every message type encodes to the vector bytes and decodes back")
    func vectors() throws {
        if ProcessInfo.processInfo.environment["CHORUS_WRITE_SYNC_VECTORS"] != nil {
            let entries = Self.messages.map { name, m in
                "    {\"name\": \"\(name)\", \"type\": \(m.code.rawValue), \"hex\": \"\(Hex.encode(m.encoded()))\"}"
            }
            let text = """
                {
                  "description": "Chorus sync protocol v1 messages (Specs/sync.md section 3): exact deterministic CBOR bytes of every message type. Keys and ids are 32 repeated bytes.",
                  "messages": [
                \(entries.joined(separator: ",\n"))
                  ]
                }

                """
            try text.write(toFile: Self.vectorPath, atomically: true, encoding: .utf8)
        }
        let data = try Data(contentsOf: URL(fileURLWithPath: Self.vectorPath))
        let json = try JSONSerialization.jsonObject(with: data) as? [String: Any]
        let list = json?["messages"] as? [[String: Any]] ?? []
        #expect(list.count == Self.messages.count)
        var types = Set<UInt64>()
        for (name, message) in Self.messages {
            guard let entry = list.first(where: { $0["name"] as? String == name }), let hex = entry["hex"] as? String,
                let bytes = Hex.decode(hex)
            else {
                Issue.record("vector \(name) missing")
                continue
            }
            #expect(message.encoded() == bytes, "\(name)")
            #expect(try SyncMessage.decode(bytes) == message, "\(name)")
            types.insert(message.code.rawValue)
        }
        #expect(types.count == SyncMessage.Code.allCases.count, "a vector for every message type")
    }

    @Test("non-canonical or unknown frames are refused")
    func refusals() {
        let hello = SyncMessage.hello(SyncHello(user: Self.k(1), capabilities: [], hops: nil, since: 0)).encoded()
        var longForm = hello
        // since = 0 written as a one-byte argument (0x18 0x00): not the shortest form.
        longForm.removeLast()
        longForm += [0x18, 0x00]
        #expect(throws: SyncError.self) { try SyncMessage.decode(longForm) }
        #expect(throws: SyncError.self) { try SyncMessage.decode([0x81, 0x18, 0x63]) }  // type 99
        #expect(throws: SyncError.unsupportedVersion(2)) { try SyncMessage.decode([0x86, 0x00, 0x02, 0x40, 0x00, 0xf6, 0x00]) }
        #expect(throws: SyncError.self) { try SyncMessage.decode(SyncMessage.want([FeedRange(author: Self.k(1), from: 2, prev: nil, to: 3)]).encoded()) }
        #expect(throws: SyncError.self) { try SyncMessage.decode([UInt8](repeating: 0, count: SyncLimits.maxFrameBytes + 1)) }
    }
}
