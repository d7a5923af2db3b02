import ChorusCBOR
import ChorusEncryption
import ChorusEvents
import Testing

/// Titles and text-only message bodies are read in place (a chat list opens
/// one of each per row); what that reading accepts, and what it gives, must
/// be exactly what decoding the CBOR and checking its schema gives.
@Suite("Sealed content: the in-place reading of titles and text bodies agrees with the decoder and the schema")
struct SealedContentTests {
    /// `{key: text}` with the text's head written as given (`width`: 0 the
    /// shortest, else 1, 2 or 4 argument bytes) around `body`.
    static func map(_ key: String, _ body: [UInt8], width: Int = 0) -> [UInt8] {
        var out: [UInt8] = [0xA1, 0x60 | UInt8(key.utf8.count)] + Array(key.utf8)
        switch width {
        case 0: CBOREncoder.appendHead(major: 3, argument: UInt64(body.count), to: &out)
        case 1: out += [0x78, UInt8(body.count)]
        case 2: out += [0x79, UInt8(body.count >> 8), UInt8(body.count & 0xFF)]
        default: out += [0x7A, 0, 0, UInt8(body.count >> 8), UInt8(body.count & 0xFF)]
        }
        return out + body
    }

    /// Every case: a title or text of lengths around the limits, with valid
    /// and invalid UTF-8, in shortest and longer heads, cut or with bytes after.
    static var cases: [(key: String, plaintext: [UInt8])] {
        var out: [(String, [UInt8])] = []
        let bodies: [[UInt8]] = [
            [], Array("hi".utf8), Array("é".utf8), [0xC3], [0xFF, 0x41], [0xED, 0xA0, 0x80], Array(repeating: 0x61, count: 23),
            Array(repeating: 0x61, count: 24), Array(repeating: 0x61, count: 200), Array(repeating: 0x61, count: 201),
            Array(repeating: 0x61, count: 4000), Array(repeating: 0x61, count: 4001),
        ]
        for key in ["title", "text", "texts"] {
            for body in bodies {
                for width in 0...3 where width != 1 || body.count <= 0xFF {
                    let whole = map(key, body, width: width)
                    out += [(key, whole), (key, whole + [0]), (key, Array(whole.dropLast()))]
                }
            }
        }
        out.append(("text", [0xA2] + Array(map("text", Array("hi".utf8)).dropFirst()) + [0x67] + Array("picture".utf8) + [0x40]))
        return out
    }

    static func entries(_ v: CBORValue?) -> Int? {
        if case .map(let entries) = v { entries.count } else { nil }
    }

    @Test("a title reads as the decoder and the schema read it")
    func titles() throws {
        for (key, plaintext) in Self.cases where key != "text" {
            let longWay = (try? CBORDecoder.decode(plaintext)).flatMap { v in
                v[text: "title"]?.textValue.flatMap { $0.utf8.count <= 200 && Self.entries(v) == 1 ? $0 : nil }
            }
            #expect(TitleContent.decode(plaintext) == longWay, "\(plaintext.prefix(12))… of \(plaintext.count) bytes")
        }
    }

    @Test("a text-only message body or edit reads as the decoder and the schema read it")
    func textBodies() throws {
        for (_, plaintext) in Self.cases {
            for edit in [false, true] {
                let v = try? CBORDecoder.decode(plaintext)
                let text = v.flatMap { v in v[text: "text"]?.textValue }
                let onlyText = Self.entries(v) == 1 && text.map { !$0.isEmpty && $0.utf8.count <= PayloadLimits.messageTextBytes } == true
                let decoded = MessageContent.decode(plaintext, edit: edit)
                // None of the other cases is a valid body: a map of another
                // key, a text out of bounds, or a picture that is no id.
                #expect(decoded == (onlyText ? MessageContent(text: text) : nil), "\(plaintext.prefix(12))… of \(plaintext.count) bytes")
            }
        }
    }
}
