/// Exactly 32 bytes: a public key, an event id, a payload hash or an object id.
public struct Bytes32: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The 32 bytes in memory order: ids are compared, hashed and kept in
    /// sets and dictionaries constantly, and inline words cost no heap
    /// allocation or reference counting, unlike an array.
    @usableFromInline let storage: (UInt64, UInt64, UInt64, UInt64)

    /// The 32 bytes, in order; always exactly 32 long (a fresh array).
    /// Inlinable, and built by `reserveCapacity` and `append`, which are
    /// specialised where they are used: `Array(unsafeUninitializedCapacity:)`
    /// and `Array(repeating:count:)` call the standard library's unspecialised
    /// allocator, which looks up the array's generic metadata on every call
    /// (keys are built from ids constantly).
    @inlinable public var bytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(32)
        Swift.withUnsafeBytes(of: storage) { out.append(contentsOf: $0) }
        return out
    }

    /// 32 bytes written in place by `body` (a hash or key output), without
    /// an intermediate array.
    init(filling body: (UnsafeMutableRawBufferPointer) throws -> Void) rethrows {
        var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        try Swift.withUnsafeMutableBytes(of: &words) { try body($0) }
        storage = words
    }

    /// Calls `body` with the 32 bytes, without copying them into an array.
    @inlinable package func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try Swift.withUnsafeBytes(of: storage, body)
    }

    /// Appends the 32 bytes to `out` (building store keys without an
    /// intermediate array).
    @inlinable package func append(to out: inout [UInt8]) {
        withUnsafeBytes { out.append(contentsOf: $0) }
    }

    private init(raw: UnsafeRawBufferPointer) {
        storage = (
            raw.loadUnaligned(fromByteOffset: 0, as: UInt64.self), raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self),
            raw.loadUnaligned(fromByteOffset: 16, as: UInt64.self), raw.loadUnaligned(fromByteOffset: 24, as: UInt64.self)
        )
    }

    /// Wraps `bytes`, or returns `nil` unless there are exactly 32 of them.
    public init?(_ bytes: [UInt8]) {
        guard bytes.count == 32 else { return nil }
        self = bytes.withUnsafeBytes { Bytes32(raw: $0) }
    }

    /// Collects any byte sequence, or returns `nil` unless it holds exactly 32 bytes.
    public init?<S: Sequence>(_ bytes: S) where S.Element == UInt8 {
        self.init(Array(bytes))
    }

    /// The common case (a slice of a key or value read from the store),
    /// without the generic sequence path.
    package init?(_ bytes: ArraySlice<UInt8>) {
        guard bytes.count == 32 else { return nil }
        self = bytes.withUnsafeBytes { Bytes32(raw: $0) }
    }

    /// The 32 bytes at `raw` (which must hold at least 32).
    package init?(_ raw: UnsafeRawBufferPointer) {
        guard raw.count == 32 else { return nil }
        self.init(raw: raw)
    }

    /// Parses lowercase or uppercase hex of exactly 64 digits.
    public init?(hex: String) {
        guard let raw = Hex.decode(hex), raw.count == 32 else { return nil }
        self.init(unchecked: raw)
    }

    /// All 32 bytes zero; used as a placeholder where no real id or key applies.
    public static let zero = Bytes32(unchecked: [UInt8](repeating: 0, count: 32))

    /// Whether all 32 bytes are equal.
    @inlinable public static func == (a: Bytes32, b: Bytes32) -> Bool {
        a.storage.0 == b.storage.0 && a.storage.1 == b.storage.1 && a.storage.2 == b.storage.2
            && a.storage.3 == b.storage.3
    }

    /// One call for all 32 bytes: ids are hashed constantly (sets and
    /// dictionaries of events, keys and objects), and the synthesized
    /// version feeds the hasher one byte at a time.
    @inlinable public func hash(into hasher: inout Hasher) {
        hasher.combine(storage.0)
        hasher.combine(storage.1)
        hasher.combine(storage.2)
        hasher.combine(storage.3)
    }

    init(unchecked bytes: [UInt8]) {
        precondition(bytes.count == 32, "Bytes32 needs exactly 32 bytes")
        self = bytes.withUnsafeBytes { Bytes32(raw: $0) }
    }

    /// The 64-digit lowercase hex form, as used in JSON output and on the command line.
    public var hex: String { withUnsafeBytes { Hex.encode($0) } }
    /// The same as ``hex``: the full 64-digit lowercase hex.
    public var description: String { hex }
    /// The first 8 bytes as hex, for human-readable tables.
    public var short: String { withUnsafeBytes { Hex.encode($0.prefix(8)) } }

    /// Bytewise lexicographic order of the 32 bytes, which is also the order of
    /// their hex strings. Words loaded big-endian compare as their bytes do.
    @inlinable public static func < (a: Bytes32, b: Bytes32) -> Bool {
        let x = (a.storage.0.bigEndian, a.storage.1.bigEndian, a.storage.2.bigEndian, a.storage.3.bigEndian)
        let y = (b.storage.0.bigEndian, b.storage.1.bigEndian, b.storage.2.bigEndian, b.storage.3.bigEndian)
        return x < y
    }
}

/// A 32-byte Ed25519 public key: an event author, a device or a user.
public typealias PublicKey = Bytes32
/// An event id: BLAKE2b-256 of the header bytes (Specs/events.md §3.3).
public typealias EventID = Bytes32
/// The 32-byte id of the thing an event is about, such as a picture, chat or
/// user (Specs/events.md §6).
public typealias ObjectID = Bytes32
/// A 32-byte BLAKE2b-256 digest, such as a payload hash or a blob hash.
public typealias Hash32 = Bytes32

/// Hexadecimal conversion of byte strings: lowercase on output, either case on input.
package enum Hex {
    private static let digits: [UInt8] = Array("0123456789abcdef".utf8)

    /// Returns two lowercase hex digits per byte, most significant nibble first.
    package static func encode<S: Sequence>(_ bytes: S) -> String where S.Element == UInt8 {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.underestimatedCount * 2)
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Parses hex digits of either case into bytes; returns `nil` for an odd
    /// number of digits or any character that is not a hex digit (no whitespace
    /// or `0x` prefix is accepted).
    package static func decode(_ text: String) -> [UInt8]? {
        let chars = Array(text.utf8)
        guard chars.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(chars.count / 2)
        var i = 0
        while i < chars.count {
            guard let hi = nibble(chars[i]), let lo = nibble(chars[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        return out
    }

    private static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

/// Keys, event ids and hashes are kept and sent as their 64-digit hex form,
/// as the typed ids are, so a view an app caches reads back the same.
extension Bytes32: Codable {
    /// Reads the 64-digit hex form (either case).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        guard let value = Bytes32(hex: text) else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "32 bytes are 64 hex digits, got \"\(text.prefix(80))\"")
        }
        self = value
    }

    /// Writes the 64-digit lowercase hex form.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(hex)
    }
}
