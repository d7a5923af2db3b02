import ChorusCBOR
import ChorusCrypto
import ChorusEvents

/// A picture sent inside a chat: the key of its encrypted blob and what the
/// relays must not see (Specs/encryption.md §7).
public struct Attachment: Hashable, Sendable, Codable {
    /// The random 32-byte key the blob bytes are encrypted with; it travels only
    /// inside the sealed message body.
    package let key: [UInt8]
    /// The image's media type, one of those allowed for `picture.created`
    /// (Specs/events.md §6.2.4).
    public let mime: String
    /// The length of the plaintext image in bytes (the blob is 16 bytes longer).
    public let size: UInt64
    /// The image width in pixels (1…65535), if known.
    public let width: UInt64?
    /// The image height in pixels (1…65535), if known.
    public let height: UInt64?

    /// Creates an attachment description; values are not validated here, but a
    /// decoded body is rejected unless they fit Specs/encryption.md §7.
    package init(key: [UInt8], mime: String, size: UInt64, width: UInt64? = nil, height: UInt64? = nil) {
        self.key = key
        self.mime = mime
        self.size = size
        self.width = width
        self.height = height
    }

    var cbor: CBORValue {
        var entries: [(String, CBORValue)] = [("key", .bytes(key)), ("mime", .text(mime)), ("size", .unsigned(size))]
        if let width { entries.append(("width", .unsigned(width))) }
        if let height { entries.append(("height", .unsigned(height))) }
        return .textMap(entries)
    }

    static let schema = PayloadSchema([
        required("key", .bytes(minCount: 32, maxCount: 32)),
        required("mime", .oneOf(PayloadLimits.imageTypes)),
        required("size", .uint(min: 1, max: PayloadLimits.maxBlobSize)),
        optional("width", .uint(min: 1, max: 65535)),
        optional("height", .uint(min: 1, max: 65535)),
    ])

    init?(_ v: CBORValue) {
        guard Self.schema.violation(in: v) == nil, let key = v[text: "key"]?.bytesValue, let mime = v[text: "mime"]?.textValue,
            let size = v[text: "size"]?.unsignedValue
        else { return nil }
        self.init(key: key, mime: mime, size: size, width: v[text: "width"]?.unsignedValue, height: v[text: "height"]?.unsignedValue)
    }
}

/// The plaintext of a sealed `message.sent` body or `message.edited` body.
public struct MessageContent: Hashable, Sendable, Codable {
    /// The message text (1…4000 UTF-8 bytes), if any; the only field of an edit.
    public var text: String?
    /// The id of a published picture the message refers to, if any, resolved as in
    /// Specs/projections.md §7.1.
    public var picture: ObjectID?
    /// A picture sent inside the chat as an encrypted blob, if any.
    public var attachment: Attachment?

    /// Creates message content; a message body needs at least one of the three fields.
    package init(text: String? = nil, picture: ObjectID? = nil, attachment: Attachment? = nil) {
        self.text = text
        self.picture = picture
        self.attachment = attachment
    }

    /// The plaintext to seal: a deterministic CBOR map holding only the fields
    /// that are set. Not validated; ``decode(_:edit:)`` rejects bodies that break the rules.
    package func encoded() -> [UInt8] {
        var entries: [(String, CBORValue)] = []
        if let text { entries.append(("text", .text(text))) }
        if let picture { entries.append(("picture", .bytes(picture.bytes))) }
        if let attachment { entries.append(("attachment", attachment.cbor)) }
        return CBOREncoder.encode(.textMap(entries))
    }

    static let bodySchema = PayloadSchema(
        [
            optional("text", .text(minBytes: 1, maxBytes: PayloadLimits.messageTextBytes)),
            optional("picture", .id32),
            optional("attachment", .dependent),
        ],
        crossCheck: { v in
            if let a = v[text: "attachment"], Attachment(a) == nil { return "attachment is malformed" }
            return v[text: "text"] == nil && v[text: "picture"] == nil && v[text: "attachment"] == nil
                ? "a message needs text, a picture or an attachment" : nil
        })
    static let editSchema = PayloadSchema([required("text", .text(minBytes: 1, maxBytes: PayloadLimits.messageTextBytes))])

    /// Decodes a message body (or, with `edit`, an edit's body); nil when
    /// the plaintext is not canonical CBOR of the right shape.
    package static func decode(_ plaintext: [UInt8], edit: Bool = false) -> MessageContent? {
        // Most bodies are text alone, `{text: t}`: read in place (a chat
        // list opens a body per row); anything else goes the long way.
        var r = HeadReader(plaintext)
        if r.head(major: 5) == 1, r.text("text"), let text = r.textValue(maxBytes: PayloadLimits.messageTextBytes), r.atEnd, !text.isEmpty {
            return MessageContent(text: text)
        }
        guard let v = try? CBORDecoder.decode(plaintext), (edit ? editSchema : bodySchema).violation(in: v) == nil else {
            return nil
        }
        return MessageContent(
            text: v[text: "text"]?.textValue, picture: v[text: "picture"]?.bytesValue.flatMap { Bytes32($0) },
            attachment: v[text: "attachment"].flatMap(Attachment.init))
    }
}

/// The plaintext of a sealed chat title.
package enum TitleContent {
    static let schema = PayloadSchema([required("title", .text(minBytes: 0, maxBytes: 200))])

    /// The plaintext to seal for a chat title: the deterministic CBOR map
    /// `{title: title}`. Not validated; titles must be at most 200 UTF-8 bytes.
    package static func encode(_ title: String) -> [UInt8] { CBOREncoder.encode(.textMap([("title", .text(title))])) }

    /// Decodes a title plaintext; `nil` unless it is canonical CBOR holding
    /// exactly a `title` text of at most 200 bytes (shown as unreadable otherwise).
    package static func decode(_ plaintext: [UInt8]) -> String? {
        // `{title: t}`, read in place (a chat list opens a title per row).
        var r = HeadReader(plaintext)
        if r.head(major: 5) == 1, r.text("title"), let title = r.textValue(maxBytes: 200), r.atEnd { return title }
        guard let v = try? CBORDecoder.decode(plaintext), schema.violation(in: v) == nil else { return nil }
        return v[text: "title"]?.textValue
    }
}
