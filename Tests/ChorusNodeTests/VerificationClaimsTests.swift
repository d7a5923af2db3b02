import ChorusCrypto
import ChorusEvents
@testable import ChorusNode
import ChorusTestSupport
import Testing

/// The claims concurrent ingests share (`VerificationClaims`): an event is
/// checked by whoever claims it first, the others take its result, and a
/// claim names the signed bytes, not only the event.
@Suite("Verification claims")
struct VerificationClaimsTests {
    static func keys(_ n: Int, seed: UInt8) -> [VerificationClaims.Key] {
        var writer = FeedWriter(seedByte: seed)
        return (0..<n).map { _ in VerificationClaims.Key(writer.next()) }
    }

    @Test("the first claim checks; later ones take its result once settled, and a failed check is released at once")
    func claimsAndResults() async {
        let claims = VerificationClaims()
        let keys = Self.keys(3, seed: 7)
        #expect(claims.claim(keys).map { if case .mine = $0 { true } else { false } } == [true, true, true])
        #expect(claims.claim(keys).map { if case .pending = $0 { true } else { false } } == [true, true, true])
        // Awaited before they are settled: the waiter wakes once all are.
        async let awaited = claims.results(of: keys)
        try? await Task.sleep(for: .milliseconds(10))
        claims.settle(keys, [true, false, true])
        #expect(await awaited == [keys[0]: true, keys[1]: false, keys[2]: true])
        // Settled good ones are shared until released; a bad one is not kept.
        let again = claims.claim(keys)
        #expect({ if case .settled(true) = again[0] { true } else { false } }())
        #expect({ if case .mine = again[1] { true } else { false } }())
        claims.release(keys)
        #expect(claims.claim([keys[0]]).map { if case .mine = $0 { true } else { false } } == [true])
    }

    @Test("a claim released unsettled wakes its waiters without a result, for them to check themselves")
    func releasedUnsettled() async {
        let claims = VerificationClaims()
        let keys = Self.keys(2, seed: 9)
        _ = claims.claim(keys)
        async let awaited = claims.results(of: keys)
        try? await Task.sleep(for: .milliseconds(10))
        claims.settle([keys[0]], [true])
        claims.release([keys[1]])
        #expect(await awaited == [keys[0]: true])
        #expect(await claims.results(of: [keys[1]]) == [:])
    }

    @Test("the same event under another signature is another claim")
    func keyedBySignedBytes() {
        var writer = FeedWriter(seedByte: 3)
        let event = writer.next()
        var other = event.encoded()
        let at = other.firstRange(of: event.signature)!.lowerBound
        other[at] ^= 1
        let forged = try! Event.decode(other)
        #expect(forged.id == event.id)
        #expect(VerificationClaims.Key(forged) != VerificationClaims.Key(event))
    }
}
