/// Reads the heads of canonical CBOR in place, for records whose layout is
/// fixed: a head that is not in its shortest form, or of another major
/// type, reads as nil, and the caller decodes the record the long way.
package struct HeadReader {
    private let raw: [UInt8]
    private var at = 0

    package init(_ raw: [UInt8]) { self.raw = raw }

    package var atEnd: Bool { at == raw.count }
    package var peek: UInt8? { at < raw.count ? raw[at] : nil }

    /// The argument of a head of major type `major` in its shortest form.
    package mutating func head(major: UInt8) -> UInt64? {
        guard at < raw.count, raw[at] >> 5 == major else { return nil }
        let info = raw[at] & 0x1F
        if info < 24 {
            at += 1
            return UInt64(info)
        }
        guard info <= 27 else { return nil }
        let length = 1 << Int(info - 24)
        guard at + 1 + length <= raw.count else { return nil }
        let value = raw[(at + 1)...(at + length)].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        let shortest: Bool =
            switch length {
            case 1: value >= 24
            case 2: value > 0xFF
            case 4: value > 0xFFFF
            default: value > 0xFFFF_FFFF
            }
        guard shortest else { return nil }
        at += 1 + length
        return value
    }

    /// Whether a text string `expected` comes next; read past it if so.
    package mutating func text(_ expected: String) -> Bool {
        let saved = at
        let utf8 = expected.utf8
        guard let length = head(major: 3), length == utf8.count, at + utf8.count <= raw.count else {
            at = saved
            return false
        }
        // Byte by byte: the generic `elementsEqual` of a slice and a UTF-8
        // view was a twentieth of a chat list's time.
        var i = at
        for byte in utf8 {
            guard raw[i] == byte else {
                at = saved
                return false
            }
            i += 1
        }
        at = i
        return true
    }

    /// A byte string.
    package mutating func byteString() -> [UInt8]? {
        let saved = at
        guard let length = head(major: 2), length <= UInt64(raw.count - at) else {
            at = saved
            return nil
        }
        at += Int(length)
        return Array(raw[(at - Int(length))..<at])
    }

    /// A byte string of exactly `count` bytes, as a slice of the input (no copy).
    package mutating func bytes(count: Int) -> ArraySlice<UInt8>? {
        let saved = at
        guard let length = head(major: 2), length == UInt64(count), at + count <= raw.count else {
            at = saved
            return nil
        }
        at += count
        return raw[(at - count)..<at]
    }

    /// A text string of at most `maxBytes` bytes of valid UTF-8 (as the
    /// decoder checks it: decoded, then compared with the bytes).
    package mutating func textValue(maxBytes: Int) -> String? {
        let saved = at
        guard let length = head(major: 3), length <= UInt64(min(maxBytes, raw.count - at)) else {
            at = saved
            return nil
        }
        let body = raw[at..<(at + Int(length))]
        let text = String(decoding: body, as: UTF8.self)
        guard text.utf8.elementsEqual(body) else {
            at = saved
            return nil
        }
        at += Int(length)
        return text
    }

    /// A simple value's byte (false 0xF4, true 0xF5, null 0xF6).
    package mutating func simple() -> UInt8? {
        guard at < raw.count, raw[at] >= 0xF4, raw[at] <= 0xF6 else { return nil }
        at += 1
        return raw[at - 1]
    }
}
