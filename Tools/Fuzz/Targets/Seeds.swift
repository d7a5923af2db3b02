import ChorusCBOR
import ChorusCrypto
import ChorusEncryption
import ChorusEvents
import ChorusNoise
import ChorusProjections
import ChorusSync
import Foundation

extension FuzzTarget {
    /// Inputs each target accepts, from the vectors in `vectors`
    /// (Specs/vectors) and built here: where a fuzzer starts, and what the
    /// test suite mutates.
    package func seeds(vectors: URL) -> [[UInt8]] {
        func hexes(_ file: String, _ keys: Set<String>) -> [[UInt8]] {
            guard let data = try? Data(contentsOf: vectors.appendingPathComponent(file)),
                let json = try? JSONSerialization.jsonObject(with: data)
            else { return [] }
            var out: [[UInt8]] = []
            func walk(_ value: Any, key: String?) {
                if let object = value as? [String: Any] {
                    for (k, v) in object.sorted(by: { $0.key < $1.key }) { walk(v, key: k) }
                } else if let list = value as? [Any] {
                    for v in list { walk(v, key: key) }
                } else if let text = value as? String, let key, keys.contains(key), let bytes = Hex.decode(text) {
                    out.append(bytes)
                }
            }
            walk(json, key: nil)
            return out
        }
        let envelopes = hexes("events.json", ["envelope_hex"])
        let frames = hexes("sync.json", ["hex"]) + hexes("reconcile.json", ["a", "b"]).filter { (try? SyncMessage.decode($0)) != nil }
        switch self {
        case .cbor: return hexes("cbor/rfc-appendix-a.json", ["hex"]) + envelopes + frames
        case .event: return envelopes
        case .frame: return frames
        case .reassembly:
            // Frames split over plaintexts of 1, 7 and 64 bytes, and a close notify.
            var stream: [UInt8] = []
            for frame in frames { stream += Self.bigEndian(UInt32(frame.count)) + frame }
            stream += [0xff, 0xff, 0xff, 0xff]
            return [1, 7, 64].map { (size: Int) -> [UInt8] in
                var input: [UInt8] = [0xff]
                for start in stride(from: 0, to: stream.count, by: size) {
                    let piece = Array(stream[start..<min(stream.count, start + size)])
                    input.append(UInt8(piece.count))
                    input += piece
                }
                return input
            }
        case .sketch:
            // Differences of 0 to 5 feeds in sketches of 2 to 8 pairs of sums.
            return (0...5).map { count in
                let tags = (0..<count).map { UInt64($0 + 1) &* 0x9E37_79B9_7F4A_7C15 }
                let errors = (0..<count).map { UInt64($0 + 3) &* 0xBF58_476D_1CE4_E5B9 }
                let pairs = max(2, count + 3 - count % 2)
                var sums: [UInt64] = []
                var powers = tags
                for _ in 0..<(2 * pairs) {
                    sums.append(zip(errors, powers).reduce(UInt64(0)) { $0 ^ GF64.mul($1.0, $1.1) })
                    powers = zip(powers, tags).map { GF64.mul($0, $1) }
                }
                let words = [UInt64(pairs)] + sums + tags.prefix(1)
                return words.flatMap { w in (0..<8).map { UInt8(truncatingIfNeeded: w >> (56 - 8 * $0)) } }
            }
        case .handshake:
            guard let key = try? NoiseKeyPair(privateKey: [UInt8](repeating: 5, count: 32)),
                let initiator = try? HandshakeState(
                    pattern: .XXpsk3, initiator: true, prologue: SecureConnectionProtocol.prologue, staticKey: key,
                    psk: [UInt8](repeating: 7, count: 32)),
                let first = try? initiator.writeMessage()
            else { return [] }
            return [first, [UInt8](repeating: 0, count: 96)]
        case .sealed:
            return hexes("encryption.json", ["sealed_hex"]) + [
                MessageContent(text: "hello").encoded(), MessageContent(text: "look", picture: Bytes32.zero).encoded(),
                TitleContent.encode("a title"),
            ]
        case .text:
            let key = Bytes32([UInt8](repeating: 0xab, count: 32)) ?? .zero
            let config = NetworkConfig(
                issuers: [key], slotPrices: NetworkConfig.defaultSlotPrices, networkKey: key,
                bootstrapRelays: [BootstrapRelay(address: "127.0.0.1:7800", key: key)])
            let texts = [
                config.invite, config.json(), "home,inbox=\(key.hex)@relay.example:7800", key.hex,
                MessageCursor(hlc: HLC(rawValue: 1 << 20), message: MessageID(key)).description,
                ChatListCursor(lastActivity: HLC(rawValue: 1 << 20), chat: ChatID(key)).description,
            ]
            let jsonLines = envelopes.map { "{\"raw\": \"\(Hex.encode($0))\"}" }.joined(separator: "\n")
            return texts.map { Array($0.utf8) } + [Array(jsonLines.utf8), envelopes.flatMap { $0 }]
        case .session: return SessionFuzzing.shared.seeds()
        case .fold: return FoldFuzzing.shared.seeds(vectors: vectors)
        }
    }

    static func bigEndian(_ value: UInt32) -> [UInt8] { (0..<4).map { UInt8(truncatingIfNeeded: value >> (24 - 8 * $0)) } }
}
