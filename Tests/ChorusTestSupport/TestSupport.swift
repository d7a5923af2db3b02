// What several test targets share: seeded randomness, the repository's
// paths, and the event vectors' file format.
import ChorusCrypto
import Foundation

/// SplitMix64: a small, seedable generator, so every random schedule and
/// workload replays from its seed.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    public var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    public mutating func bytes(_ n: Int) -> [UInt8] { (0..<n).map { _ in UInt8(truncatingIfNeeded: next()) } }
}

/// The repository's root directory (this file is Tests/ChorusTestSupport/TestSupport.swift).
public let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

/// A file under Specs/vectors/.
public func specVector(_ relativePath: String) -> URL {
    repositoryRoot.appendingPathComponent("Specs/vectors").appendingPathComponent(relativePath)
}

/// Hex from a vector file, which the suite trusts to be well formed.
public func hex(_ s: String) -> [UInt8] {
    guard let bytes = Hex.decode(s) else { preconditionFailure("bad hex in a test vector: \(s)") }
    return bytes
}

/// Specs/vectors/events.json.
public struct EventVectorFile: Decodable, Sendable {
    public let signing_context_hex: String
    public let drift_ms: UInt64
    public let valid: [ValidEventVector]
    public let invalid: [InvalidEventVector]

    public static func load() throws -> EventVectorFile {
        try JSONDecoder().decode(EventVectorFile.self, from: Data(contentsOf: specVector("events.json")))
    }
}

public struct ValidEventVector: Decodable, Sendable {
    public let name: String
    public let author_seed: String
    public let author: String
    public let seq: UInt64
    public let prev: String?
    public let hlc: UInt64
    public let kind: String
    public let kind_code: UInt64
    public let object: String
    public let payload_hex: String
    public let payload_present: Bool
    public let payload_hash: String
    public let header_hex: String
    public let signed_message_hex: String
    public let signature_hex: String
    public let id: String
    public let envelope_hex: String
}

public struct InvalidEventVector: Decodable, Sendable {
    public let name: String
    public let envelope_hex: String
    public let prior_hex: [String]
    public let now_ms: UInt64
    public let error: String
    public let decode_error: Bool
}

/// A stand-in for a sealed value (Specs/encryption.md §7) in projection
/// tests: projections never open sealed values, so any bytes of the sealed
/// form's shape (epoch id, nonce, ciphertext and tag) do. The "epoch" is the
/// hash of the text, so distinct texts give distinct values.
public func fakeSealed(_ text: String) -> [UInt8] {
    Blake2b.hash256(Array(text.utf8)).bytes + [UInt8](repeating: 0, count: 24) + Array(text.utf8) + [UInt8](repeating: 0, count: 16)
}
