import ChorusCrypto

/// What every typed id shares: the 32 bytes an event carries (Specs/events.md
/// §6), shown as 64 lowercase hex digits. The types keep a user from being
/// passed where a picture is expected; `raw` is the bytes for code that
/// works below the domain (keys, wire, storage).
/// Ids are `Identifiable` (each is its own id), `Codable` and
/// `LosslessStringConvertible` as their hex form, so an app can keep them in
/// SwiftUI lists, caches and URLs.
public protocol TypedID: Hashable, Comparable, Sendable, CustomStringConvertible, LosslessStringConvertible, Identifiable, Codable {
    /// The 32 bytes as they appear in events and on the wire.
    var raw: Bytes32 { get }
    /// Wraps 32 bytes; the caller vouches that they name this kind of thing.
    init(_ raw: Bytes32)
}

extension TypedID {
    /// Parses 64 hex digits (either case); nil for anything else.
    public init?(hex: String) {
        guard let raw = Bytes32(hex: hex) else { return nil }
        self.init(raw)
    }

    /// The 64-digit lowercase hex form, as in JSON output and on the command line.
    public var hex: String { raw.hex }
    /// The first 8 bytes as hex, for human-readable tables.
    public var short: String { raw.short }
    /// The 32 bytes as an array.
    public var bytes: [UInt8] { raw.bytes }
    /// The same as ``hex``.
    public var description: String { raw.hex }

    /// The bytewise order of the raw ids.
    public static func < (a: Self, b: Self) -> Bool { a.raw < b.raw }

    /// The id itself.
    public var id: Self { self }

    /// Parses 64 hex digits (either case); nil for anything else.
    public init?(_ description: String) { self.init(hex: description) }

    /// Reads the 64-digit hex form.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        guard let raw = Bytes32(hex: text) else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "an id is 64 hex digits, got \"\(text.prefix(80))\"")
        }
        self.init(raw)
    }

    /// Writes the 64-digit lowercase hex form.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(raw.hex)
    }
}

/// A user: the public half of the user key, which signs device bindings
/// (Specs/events.md §6.1) and is the object of profile edits and follows.
public struct UserID: TypedID {
    /// The 32 bytes as they appear in events.
    public let raw: Bytes32
    /// Wraps 32 bytes taken to name this kind of thing.
    public init(_ raw: Bytes32) { self.raw = raw }
}

/// A device: the public key that signs its feed's events.
public struct DeviceID: TypedID {
    /// The 32 bytes as they appear in events.
    public let raw: Bytes32
    /// Wraps 32 bytes taken to name this kind of thing.
    public init(_ raw: Bytes32) { self.raw = raw }
}

/// A picture: the object id its `picture.created` event names.
public struct PictureID: TypedID, Likeable {
    /// The 32 bytes as they appear in events.
    public let raw: Bytes32
    /// Wraps 32 bytes taken to name this kind of thing.
    public init(_ raw: Bytes32) { self.raw = raw }
}

/// A chat: the object id its `chat.created` event names.
public struct ChatID: TypedID {
    /// The 32 bytes as they appear in events.
    public let raw: Bytes32
    /// Wraps 32 bytes taken to name this kind of thing.
    public init(_ raw: Bytes32) { self.raw = raw }
}

/// A chat message: the id of the `message.sent` event that sent it.
public struct MessageID: TypedID, Likeable {
    /// The 32 bytes as they appear in events.
    public let raw: Bytes32
    /// Wraps 32 bytes taken to name this kind of thing.
    public init(_ raw: Bytes32) { self.raw = raw }
}

/// What a like can target: a picture or a message (Specs/events.md §6.2.10).
public protocol Likeable: TypedID {}
