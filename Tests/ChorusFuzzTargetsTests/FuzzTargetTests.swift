import ChorusCBOR
import ChorusEvents
import ChorusFuzzTargets
import ChorusSync
import ChorusTestSupport
import Foundation
import Testing

/// The fuzz targets (Tools/Fuzz/Targets) on their seeds and on seeded
/// mutations of them: every parser of outside bytes answers every input
/// without trapping, and keeps its promises (a trap fails the run). Tools/fuzz
/// searches much further with libFuzzer; this keeps what it checks from
/// breaking unnoticed, and replays the inputs it found.
@Suite struct FuzzTargetTests {
    static let vectors = repositoryRoot.appendingPathComponent("Specs/vectors")

    @Test(arguments: FuzzTarget.allCases)
    func seedsRun(_ target: FuzzTarget) async {
        let seeds = await Self.offThePool { target.seeds(vectors: Self.vectors) }
        #expect(!seeds.isEmpty, "\(target.rawValue) has no seeds")
        await Self.offThePool { for seed in seeds { target.run(seed) } }
    }

    /// Byte flips, boundary values, insertions, deletions, repeats, cuts and
    /// splices of the seeds, a few thousand per target (a few hundred
    /// sessions and folds, which write), the same every run.
    @Test(arguments: FuzzTarget.allCases)
    func mutationsRun(_ target: FuzzTarget) async {
        await Self.offThePool {
            let seeds = target.seeds(vectors: Self.vectors)
            var random = SplitMix64(seed: 0xF0_22 &+ UInt64(FuzzTarget.allCases.firstIndex(of: target) ?? 0))
            for _ in 0..<(target == .session || target == .fold ? 300 : 3000) {
                var input = seeds[Int(random.next() % UInt64(seeds.count))]
                for _ in 0...(random.next() % 4) { Self.mutate(&input, seeds: seeds, random: &random) }
                target.run(input)
            }
        }
    }

    /// Runs `body` on a thread of its own: the session and fold targets wait
    /// for their node's tasks as libFuzzer's callback must, synchronously,
    /// which on a thread of the tests' cooperative pool could starve the very
    /// tasks it waits for.
    static func offThePool<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            let thread = Thread { continuation.resume(returning: body()) }
            thread.stackSize = 8 << 20
            thread.start()
        }
    }

    static func mutate(_ input: inout [UInt8], seeds: [[UInt8]], random: inout SplitMix64) {
        func position(_ extra: Int = 0) -> Int { Int(random.next() % UInt64(input.count + extra)) }
        let boundary: [UInt8] = [0x00, 0x01, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1f, 0x20, 0x3f, 0x40, 0x5f, 0x7f, 0x80, 0x9f, 0xbf, 0xf6, 0xff]
        switch random.next() % 7 {
        case 0 where !input.isEmpty: input[position()] ^= 1 << UInt8(random.next() % 8)
        case 1 where !input.isEmpty: input[position()] = boundary[Int(random.next() % UInt64(boundary.count))]
        case 2: input.insert(UInt8(truncatingIfNeeded: random.next()), at: position(1))
        case 3 where !input.isEmpty: input.remove(at: position())
        case 4 where !input.isEmpty:
            let start = position()
            let end = min(input.count, start + 1 + Int(random.next() % 16))
            input.insert(contentsOf: input[start..<end], at: position(1))
        case 5: input = Array(input.prefix(position(1)))
        default:
            let other = seeds[Int(random.next() % UInt64(seeds.count))]
            guard !other.isEmpty else { return }
            let cut = Int(random.next() % UInt64(other.count))
            input = Array(input.prefix(position(1))) + other[cut...]
        }
    }

    /// Inputs fuzzing found that broke a promise, replayed after the fix.
    @Test(arguments: [
        // fold: a coin.credited naming the zero object (the object coin facts
        // are filed under) was refused as damaged projection state.
        (FuzzTarget.fold,
         "1600ffff0066a46475736572582062f3a6c169d85b5cda30005e08abe0e174033f63898b3f7b4c304cd0baae3ae166616d6f756e741901f4"
            + "6770726f6475637469636f696e735f353030677265636569707478184750412e333337322d343431312d303035312d3535323031"),
    ])
    func foundInputs(_ target: FuzzTarget, _ hex: String) async {
        let input = stride(from: 0, to: hex.count, by: 2).compactMap { i -> UInt8? in
            let start = hex.index(hex.startIndex, offsetBy: i)
            return UInt8(hex[start..<hex.index(start, offsetBy: 2)], radix: 16)
        }
        #expect(input.count * 2 == hex.count)
        await Self.offThePool { target.run(input) }
    }

    /// The mutations reach the parsers' accepting paths too, where the
    /// promises are checked: a few mutants of each decoder still decode.
    @Test func mutationsReachAcceptedInputs() {
        var random = SplitMix64(seed: 7)
        for target in [FuzzTarget.cbor, .frame] {
            let seeds = target.seeds(vectors: Self.vectors)
            var accepted = 0
            for _ in 0..<2000 {
                var input = seeds[Int(random.next() % UInt64(seeds.count))]
                Self.mutate(&input, seeds: seeds, random: &random)
                let decodes = target == .cbor ? (try? CBORDecoder.decode(input)) != nil : (try? SyncMessage.decode(input)) != nil
                if decodes { accepted += 1 }
            }
            #expect(accepted > 50, "\(target.rawValue): only \(accepted) of 2000 mutants decode")
        }
        let envelopes = FuzzTarget.event.seeds(vectors: Self.vectors)
        #expect(envelopes.contains { (try? Event.decode($0)) != nil })
    }
}
