import ChorusCBOR

/// The type of one payload field (Specs/events.md §6.1).
package indirect enum FieldType: Sendable {
    /// UTF-8 text of `minBytes...maxBytes` bytes (byte length of the encoding).
    case text(minBytes: Int, maxBytes: Int)
    /// A 32-byte byte string: a key, an event id, an object id or a hash.
    case id32
    /// A byte string of `minCount...maxCount` bytes.
    case bytes(minCount: Int, maxCount: Int)
    /// An unsigned integer in `min...max`; negative integers are refused.
    case uint(min: UInt64, max: UInt64)
    /// `true` or `false`.
    case bool
    /// One of a fixed set of text values.
    case oneOf([String])
    /// A calendar date `YYYY-MM-DD` (proleptic Gregorian, year 1900...2999).
    case date
    /// An array of `minCount...maxCount` items, each of the element type, no two equal.
    case list(of: FieldType, minCount: Int, maxCount: Int)
    /// The inner type or `null`.
    case nullable(FieldType)
    /// Any value; a schema's cross-field rule gives its real type.
    case dependent
    /// An encrypted value (Specs/encryption.md §7): a byte string of
    /// `PayloadLimits.sealedOverhead...maxBytes` bytes.
    case sealed(maxBytes: Int)

    func check(_ value: CBORValue, path: String) -> String? {
        switch self {
        case .text(let minBytes, let maxBytes):
            guard let s = value.textValue else { return "\(path) must be a text string" }
            let n = s.utf8.count
            if n < minBytes || n > maxBytes { return "\(path) must be \(minBytes)...\(maxBytes) bytes of UTF-8, got \(n)" }
            return nil
        case .id32:
            guard let b = value.bytesValue, b.count == 32 else { return "\(path) must be a 32-byte byte string" }
            return nil
        case .bytes(let minCount, let maxCount):
            guard let b = value.bytesValue else { return "\(path) must be a byte string" }
            if b.count < minCount || b.count > maxCount { return "\(path) must be \(minCount)...\(maxCount) bytes, got \(b.count)" }
            return nil
        case .uint(let lo, let hi):
            guard let n = value.unsignedValue else { return "\(path) must be an unsigned integer" }
            if n < lo || n > hi { return "\(path) must be in \(lo)...\(hi), got \(n)" }
            return nil
        case .bool:
            return value.boolValue == nil ? "\(path) must be true or false" : nil
        case .oneOf(let options):
            guard let s = value.textValue, options.contains(s) else {
                return "\(path) must be one of \(options.joined(separator: ", "))"
            }
            return nil
        case .date:
            guard let s = value.textValue, DateText.isValid(s) else { return "\(path) must be a date YYYY-MM-DD" }
            return nil
        case .list(let element, let minCount, let maxCount):
            guard let items = value.arrayValue else { return "\(path) must be an array" }
            if items.count < minCount || items.count > maxCount {
                return "\(path) must hold \(minCount)...\(maxCount) items, got \(items.count)"
            }
            for (i, item) in items.enumerated() {
                if let problem = element.check(item, path: "\(path)[\(i)]") { return problem }
            }
            if Set(items).count != items.count { return "\(path) must not repeat an item" }
            return nil
        case .nullable(let inner):
            return value.isNull ? nil : inner.check(value, path: path)
        case .dependent:
            return nil
        case .sealed(let maxBytes):
            return FieldType.bytes(minCount: PayloadLimits.sealedOverhead, maxCount: maxBytes).check(value, path: path)
        }
    }
}

/// One field of a payload schema: its text key, the type of its value, and whether
/// it must be present. Built with `required(_:_:)` and `optional(_:_:)`.
package struct FieldSpec: Sendable {
    /// The field's text key in the payload map.
    package let name: String
    /// The type the field's value must satisfy when the key is present.
    package let type: FieldType
    /// Whether the key must be present; an optional key may be absent.
    package let required: Bool
}

/// The schema of one kind's payload: a CBOR map with text keys. Keys not
/// listed are refused, so every accepted payload has one meaning.
package struct PayloadSchema: Sendable {
    /// The fields a payload may hold; any other key is refused.
    package let fields: [FieldSpec]
    /// A rule spanning several fields, checked after the per-field rules.
    let crossCheck: (@Sendable (CBORValue) -> String?)?

    /// Builds a schema from its fields and an optional cross-field rule, which returns
    /// a description of the violation or nil and runs after the per-field checks.
    package init(_ fields: [FieldSpec], crossCheck: (@Sendable (CBORValue) -> String?)? = nil) {
        self.fields = fields
        self.crossCheck = crossCheck
    }

    /// Returns a description of the first violation, or nil.
    package func violation(in payload: CBORValue) -> String? {
        guard let entries = payload.mapEntries else { return "payload must be a map" }
        for entry in entries {
            guard let key = entry.key.textValue else { return "payload keys must be text strings" }
            guard let spec = fields.first(where: { $0.name == key }) else { return "unknown field \"\(key)\"" }
            if let problem = spec.type.check(entry.value, path: key) { return problem }
        }
        for spec in fields where spec.required {
            if payload[text: spec.name] == nil { return "missing required field \"\(spec.name)\"" }
        }
        return crossCheck?(payload)
    }
}

/// A field whose key must be present, with a value of `type`.
package func required(_ name: String, _ type: FieldType) -> FieldSpec { FieldSpec(name: name, type: type, required: true) }
/// A field whose key may be absent; when present, its value must be of `type`.
package func optional(_ name: String, _ type: FieldType) -> FieldSpec { FieldSpec(name: name, type: type, required: false) }

/// Bounds shared by the schemas; Specs/events.md §6 lists the same numbers.
public enum PayloadLimits {
    /// The largest coin `amount` (and slot `price`): 10^12 coins (`AMOUNT`, Specs/events.md §6.1).
    public static let maxCoinAmount: UInt64 = 1_000_000_000_000
    /// The most add ids one removal's `seen` may name (`SEEN` = `array<id32>[1..1024]`).
    package static let maxSeenTags = 1024
    /// The most user keys a `chat.created` may list in `members`.
    public static let maxChatMembers = 1024
    /// The number of slot numbers the schemas accept (`SLOT` = `uint[0..63]`); a network
    /// configures 1...64 slots (Specs/projections.md §1).
    package static let maxSlots: UInt64 = 64
    /// Most relays in a user's relay list (`relays.set`).
    public static let maxRelays = 8
    /// The largest blob `size`, 2^40 bytes, of a picture or of a picture sent in a message.
    public static let maxBlobSize: UInt64 = 1 << 40
    /// The longest message text, in UTF-8 bytes: the `text` inside a sealed body
    /// (Specs/encryption.md §7).
    public static let messageTextBytes = 4000
    /// The longest chat title in UTF-8 bytes, before sealing (Specs/encryption.md §7).
    public static let chatTitleBytes = 200
    /// The longest picture caption, in UTF-8 bytes.
    public static let captionBytes = 2000
    /// The media types a picture's `mime` may name (also those of a picture sent in a chat).
    public static let imageTypes = ["image/jpeg", "image/png", "image/gif", "image/webp", "image/heic", "image/avif"]
    /// A sealed value is epoch id (32) || nonce (24) || ciphertext with its
    /// 16-byte tag (Specs/encryption.md §7): at least 72 bytes.
    package static let sealedOverhead = 72
    /// The longest sealed chat title (`chat.created` `title`), in bytes.
    package static let sealedTitleBytes = 512
    /// The longest sealed message body (`message.sent` and `message.edited` `body`), in bytes.
    package static let sealedBodyBytes = 4608
    /// One wrap of an epoch key: device key (32) || wrapped key (48) (Specs/encryption.md §5).
    package static let wrapBytes = 80
    /// The most wraps one `chat.key` may carry, so `wraps` is at most 768 × 80 = 61 440 bytes.
    package static let maxWraps = 768
}

/// Profile fields and the type of each one's value (`profile.set`).
public enum ProfileField: String, CaseIterable, Sendable {
    /// The fields a `profile.set` may name (Specs/events.md §6.2.3); the raw value is
    /// the wire name.
    case name, bio, city, birthday, avatar, visibility, gender, website

    /// `visibility` is retired: it promised that profile fields could be
    /// kept from non-followers, which a network that replicates whole feeds
    /// cannot do without encrypting them. It still decodes (older events
    /// carry it) but takes no effect (Specs/projections.md §6.2), and no
    /// node writes it.
    package var isRetired: Bool { self == .visibility }

    /// The fields a node may set.
    package static var settable: [ProfileField] { allCases.filter { !$0.isRetired } }

    /// The type a non-null `value` must have for this field (the cross-field rule of
    /// `profile.set`); `null` always clears the field.
    package var valueType: FieldType {
        switch self {
        case .name: .text(minBytes: 1, maxBytes: 100)
        case .bio: .text(minBytes: 0, maxBytes: 1000)
        case .city: .text(minBytes: 0, maxBytes: 100)
        case .birthday: .date
        case .avatar: .id32
        case .visibility: .oneOf(["public", "followers", "private"])
        case .gender: .text(minBytes: 0, maxBytes: 32)
        case .website: .text(minBytes: 0, maxBytes: 200)
        }
    }
}

extension EventKind {
    /// The payload schema of a known kind (from its typed payload,
    /// Payloads.swift); nil for an unknown kind, whose payload is only
    /// required to be deterministic CBOR (Specs/events.md §6.3).
    package var schema: PayloadSchema? { payloadType?.schema }
}


enum DateText {
    static func isValid(_ s: String) -> Bool {
        let c = Array(s.utf8)
        guard c.count == 10, c[4] == UInt8(ascii: "-"), c[7] == UInt8(ascii: "-") else { return false }
        func num(_ r: Range<Int>) -> Int? {
            var v = 0
            for i in r {
                guard c[i] >= UInt8(ascii: "0"), c[i] <= UInt8(ascii: "9") else { return nil }
                v = v * 10 + Int(c[i] - UInt8(ascii: "0"))
            }
            return v
        }
        guard let y = num(0..<4), let m = num(5..<7), let d = num(8..<10) else { return false }
        guard (1900...2999).contains(y), (1...12).contains(m), d >= 1 else { return false }
        let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
        let days = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][m - 1]
        return d <= days
    }
}
