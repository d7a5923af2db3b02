import ChorusCrypto
import ChorusEvents
import ChorusProjections
import ChorusTestSupport
import Testing

/// Lists read by pages (Specs/api.md §5): every page after the last id of
/// the one before, together the whole list in its order, nothing twice.
@Suite("Projections: lists by pages")
struct PagingTests {
    /// Reads `read` page by page until a short page.
    static func allPages<T: Equatable>(_ size: Int, _ read: (T?, Int) throws -> [T]) throws -> [[T]] {
        var pages: [[T]] = []
        var after: T? = nil
        while true {
            let page = try read(after, size)
            #expect(page.count <= size)
            if !page.isEmpty { pages.append(page) }
            guard page.count == size, let last = page.last else { return pages }
            after = last
        }
    }

    @Test("followers (without the blocked), following, likes and chats by pages are the whole lists, in order")
    func pagesMakeTheWholeList() throws {
        let s = Scenario()
        let bob = try s.person(devices: 1)
        var events = bob.bindings
        let picture = try s.picture(bob.d1, at: 10)
        events.append(picture.event)
        var people: [Scenario.Person] = []
        for i in 0..<230 {
            let p = try s.person(devices: 1)
            people.append(p)
            events += p.bindings
            events.append(try p.d1.sign(.followAdded, bob.key, hlc: Scenario.at(20 + UInt64(i))))
            if i % 2 == 0 { events.append(try p.d1.sign(.likeAdded, picture.id, hlc: Scenario.at(400 + UInt64(i)))) }
        }
        var t: UInt64 = 1000
        func next() -> HLC {
            t += 1
            return Scenario.at(t)
        }
        for p in people.prefix(150) { events.append(try bob.d1.sign(.followAdded, p.key, hlc: next())) }
        for p in people.suffix(7) { events.append(try bob.d1.sign(.blockAdded, p.key, hlc: next())) }
        var chats: [ObjectID] = []
        for i in 0..<8 {
            let chat = people[i].d1.createdID(s.rng.bytes(16))
            chats.append(chat)
            events.append(try people[i].d1.sign(.chatCreated, chat, Payload.chatCreated(members: [bob.key]), hlc: next()))
        }
        let r = try s.replica()
        _ = try r.deliver(events)
        let p = r.projections
        let user = UserID(bob.key)

        let followers = try p.followers(of: user)
        #expect(followers.count == 223)
        let followerPages = try Self.allPages(100) { try p.followers(of: user, after: $0, limit: $1) }
        #expect(followerPages.map(\.count) == [100, 100, 23])
        #expect(followerPages.flatMap { $0 } == followers)

        let following = try p.following(of: user)
        #expect(following.count == 150)
        #expect(try Self.allPages(100) { try p.following(of: user, after: $0, limit: $1) }.flatMap { $0 } == following)
        #expect(try Self.allPages(1) { try p.following(of: user, after: $0, limit: $1) }.flatMap { $0 } == following)

        let likes = try p.likes(of: PictureID(picture.id))
        #expect(likes.count == 115)
        let likePages = try Self.allPages(50) { try p.likes(of: PictureID(picture.id), after: $0, limit: $1) }
        #expect(likePages.map(\.count) == [50, 50, 15] && likePages.flatMap { $0 } == likes)

        let all = try p.chats(of: user).map(\.id)
        #expect(all.count == 8)
        #expect(try Self.allPages(3) { try p.chats(of: user, after: $0, limit: $1).map(\.id) }.flatMap { $0 } == all)
        #expect(try p.chats(of: user, after: all.last, limit: 3).isEmpty)
        #expect(throws: (any Error).self) { try p.chats(of: user, after: ChatID(s.rng.bytes32()), limit: 3) }
        #expect(try p.followers(of: user, after: nil, limit: 0).isEmpty)
    }
}
