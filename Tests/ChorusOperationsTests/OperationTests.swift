import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusOperations
import ChorusProjections
import ChorusStorage
import ChorusTestSupport
import Foundation
import Testing

@Suite("Typed operations (ChorusOperations)", .closingNodes)
struct OperationTests {
    static func id(_ byte: UInt8) -> Bytes32 { Bytes32(hex: String(repeating: String(format: "%02x", byte), count: 32))! }

    struct Sample: Encodable {
        let id: String
        let count: UInt64
        let delta: Int
        let caption: String?
        let flags: [Bool]
        let nested: Inner?
        struct Inner: Encodable { let z: String; let a: Int? }
    }

    @Test("results encode in declaration order, absent values as null, nested values and arrays in place")
    func encoderKeepsOrderAndNulls() throws {
        let value = Sample(id: "x\"y", count: 3, delta: -2, caption: nil, flags: [true, false], nested: .init(z: "z", a: nil))
        let json = try JSONValueEncoder().encode(value)
        #expect(json.rendered() == #"{"id":"x\"y","count":3,"delta":-2,"caption":null,"flags":[true,false],"nested":{"z":"z","a":null}}"#)
        // A JSONValue inside a result stays as it is; floating-point numbers are refused.
        #expect(try JSONValueEncoder().encode([JSONValue.object([("b", .uint(1)), ("a", .null)])]).rendered() == #"[{"b":1,"a":null}]"#)
        #expect(throws: EncodingError.self) { try JSONValueEncoder().encode(["x": 1.5]) }
    }

    @Test("library errors keep their codes and take the kind their case means")
    func errorKinds() {
        let cases: [(any Error, OperationError.Kind, String, Int)] = [
            (NodeError.refused(.unknownChat(ChatID(Self.id(1)))), .notFound, "chat_unknown", 404),
            (NodeError.refused(.alreadyAdded(what: "follow", target: Self.id(2))), .conflict, "already_added", 409),
            (NodeError.refused(.insufficientRights(held: 1, needed: 5)), .refused, "beyond_rights", 422),
            (NodeError.refused(.textLength(bytes: 4001)), .badInput, "text_length", 400),
            (NodeError.refused(.pictureTooLarge(bytes: 10, limit: 5)), .tooLarge, "picture_too_large", 413),
            (StorageError.closed, .unavailable, "closed", 503),
            (QueryError.badCursor("x"), .badInput, "bad_cursor", 400),
            (OperationError.badID("12", what: "USER"), .badInput, "bad_id", 400),
        ]
        for (error, kind, code, status) in cases {
            let failure = OperationError(error)
            #expect(failure.kind == kind && failure.code == code && failure.httpStatus == status, "\(error): \(failure)")
            #expect(!failure.message.isEmpty)
        }
    }

    @Test("a mutation reports its fields, event and effect; a second follow is a conflict with its code; a like finds a message by id")
    func mutationsReport() async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let node = opened(try await Node.create(at: dir.store("a"), network: NetworkConfig()))
        let bob = Self.id(0xB0)
        let followed = try await Relate(.follow, bob).run(on: node)
        let json = try JSONValueEncoder().encode(followed).rendered()
        #expect(json == #"{"target":"\#(bob.hex)","event":"\#(followed.event.hex)","effective":true}"#)
        #expect(followed.failure == nil && followed.summary == "Followed \(bob.short)")
        #expect(try node.projections.following(of: node.identity.user).map(\.raw) == [bob])
        guard case .failure(let again) = await Relate(.follow, bob).perform(on: node) else {
            Issue.record("a second follow was accepted")
            return
        }
        #expect(again.code == "already_added" && again.httpStatus == 409)
        guard case .failure(let own) = await Relate(.follow, node.identity.user.raw).perform(on: node) else {
            Issue.record("following oneself was accepted")
            return
        }
        #expect(own.code == "self" && own.httpStatus == 422)

        let chat = try await node.createChat(title: "Roofs").object
        let sent = try await SendMessage(chat: chat, text: "hello").run(on: node)
        let message = MessageID(try #require(Bytes32(hex: sent.fields.message)))
        #expect(try node.projections.message(message) != nil)
        let liked = try await Relate(.like, message.raw).run(on: node)
        #expect(try node.projections.likes(of: message).map(\.raw) == [node.identity.user.raw], "\(liked)")
        let read = try await MarkRead(chat: chat, upTo: message).run(on: node)
        #expect(try JSONValueEncoder().encode(read).rendered() == #"{"event":"\#(read.event.hex)","effective":true}"#)
        guard case .failure(let unknown) = await SendMessage(chat: ChatID(bob), text: "to nowhere").perform(on: node) else {
            Issue.record("a message to an unknown chat was accepted")
            return
        }
        #expect(unknown.code == "chat_unknown" && unknown.httpStatus == 404)
        guard case .failure(let long) = await SendMessage(chat: chat, text: String(repeating: "a", count: 4001)).perform(on: node) else {
            Issue.record("a text of 4,001 bytes was accepted")
            return
        }
        #expect(long.code == "text_length" && long.httpStatus == 400)
        await node.close()
    }
}

@Suite("The log, read by pages (ChorusOperations)", .closingNodes)
struct LogOperationTests {
    @Test("every combination of kind, since, limit and latest answers what filtering the whole log would, across many pages")
    func pagesAnswerAsTheWholeLog() async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let node = opened(try await Node.create(at: dir.store("a"), network: NetworkConfig()))
        // 2,600 events over more than two pages: profile edits, with a follow every 7th.
        for i in 0..<2_600 {
            if i % 7 == 0, let user = Bytes32(hex: String(format: "%064x", i + 1)) {
                _ = try await node.follow(UserID(user))
            } else {
                _ = try await node.setProfile(.bio("edit \(i)"))
            }
        }
        let all = try node.arrivals(since: 0)
        for kind in [nil, EventKind(name: "follow.added"), EventKind(name: "profile.set")] {
            for since in [UInt64(0), 1_500] {
                for limit in [nil, 0, 1, 5, 1_100] as [Int?] {
                    for latest in [false, true] {
                        var expected = all.filter { e in e.arrival > since && (kind.map { e.event.kind == $0 } ?? true) }
                        if latest { expected.reverse() }
                        if let limit { expected = Array(expected.prefix(limit)) }
                        let got = try await ListLog(kind: kind, since: since, limit: limit, latest: latest).run(on: node).events
                        #expect(got.map(\.arrival) == expected.map(\.arrival), "kind \(String(describing: kind)) since \(since) limit \(String(describing: limit)) latest \(latest)")
                    }
                }
            }
        }
        await node.close()
    }

    @Test("the log's latest events come newest first, a window at a time: as many as asked without a kind, past other kinds with one, never before since")
    func latestLogEvents() async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let node = opened(try await Node.create(at: dir.store("a"), network: NetworkConfig()))
        for i in 0..<20 {
            _ = try await Relate(.follow, OperationTests.id(UInt8(i + 1))).run(on: node)
            _ = try await node.setProfile(.bio, .text("bio \(i)"))
        }
        let last = try node.lastArrival()
        let all = try await ListLog().run(on: node).events
        #expect(all.count == Int(last))
        let one = try await ListLog(limit: 1, latest: true).run(on: node).events
        #expect(one.map(\.arrival) == [last])
        let three = try await ListLog(limit: 3, latest: true).run(on: node).events
        #expect(three.map(\.arrival) == [last, last - 1, last - 2])
        let follows = try await ListLog(kind: .followAdded, limit: 2, latest: true).run(on: node).events
        #expect(follows.map(\.arrival) == all.filter { $0.event.kind == .followAdded }.suffix(2).reversed().map(\.arrival))
        let since = try await ListLog(since: last - 4, latest: true).run(on: node).events
        #expect(since.map(\.arrival) == Array((last - 3...last).reversed()))
        await node.close()
    }
}
