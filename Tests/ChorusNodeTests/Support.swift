import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusNode
import ChorusTestSupport
import Foundation
import Synchronization
import Testing

/// A wall clock the test sets by hand.
final class ManualClock: Sendable {
    private let millis: Atomic<UInt64>
    init(_ start: UInt64) { millis = Atomic(start) }
    func set(_ value: UInt64) { millis.store(value, ordering: .sequentiallyConsistent) }
    var now: UInt64 { millis.load(ordering: .sequentiallyConsistent) }
}

func options(clock: ManualClock? = nil, mapSize: Int? = nil) -> NodeOptions {
    var o = NodeOptions()
    if let clock { o.clock = { clock.now } }
    if let mapSize { o.initialMapSize = mapSize }
    return o
}

/// Signs events of one feed without a node, for building ingest batches.
struct FeedWriter {
    let key: SigningKey
    var head: (seq: UInt64, id: EventID, hlc: HLC)? = nil
    var millis: UInt64

    init(seedByte: UInt8, startMillis: UInt64 = 1_700_000_000_000) {
        key = SigningKey(seed: [UInt8](repeating: seedByte, count: 32))!
        millis = startMillis
    }

    mutating func next(_ text: String = "hello") -> Event {
        millis += 1
        let e = try! Event.sign(
            with: key, seq: (head?.seq ?? 0) + 1, prev: head?.id, hlc: HLC(physicalMillis: millis, logical: 0),
            kind: .profileSet, object: key.publicKey, payload: .textMap([("field", .text("bio")), ("value", .text(text))]))
        head = (e.seq, e.id, e.hlc)
        return e
    }
}

