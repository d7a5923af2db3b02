import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusParallel
import ChorusStorage

/// A state record's canonical CBOR map written field by field, without a
/// `CBORValue` tree (records are encoded for every object a fold writes).
/// The caller gives the entry count and puts the keys in canonical order
/// (shorter first, then bytewise); each record's test checks it against
/// the generic encoder.
struct RecordMapWriter {
    private(set) var out: [UInt8] = []

    init(entries: Int, capacity: Int) {
        out.reserveCapacity(capacity)
        CBOREncoder.appendHead(major: 5, argument: UInt64(entries), to: &out)
    }

    mutating func key(_ name: String) { text(name) }
    mutating func text(_ value: String) {
        CBOREncoder.appendHead(major: 3, argument: UInt64(value.utf8.count), to: &out)
        out.append(contentsOf: value.utf8)
    }
    mutating func bytes(_ value: [UInt8]) {
        CBOREncoder.appendHead(major: 2, argument: UInt64(value.count), to: &out)
        out.append(contentsOf: value)
    }
    mutating func bytes(_ value: Bytes32) {
        CBOREncoder.appendHead(major: 2, argument: 32, to: &out)
        value.append(to: &out)
    }
    mutating func unsigned(_ value: UInt64) { CBOREncoder.appendHead(major: 0, argument: value, to: &out) }
    mutating func `true`() { out.append(0xF5) }
}

/// Reads the heads of canonical CBOR in place, for records whose layout is
/// fixed: a head that is not in its shortest form, or of another major
/// type, reads as nil, and the caller decodes the record the long way.
struct HeadReader {
    private let raw: [UInt8]
    private var at = 0

    init(_ raw: [UInt8]) { self.raw = raw }

    var atEnd: Bool { at == raw.count }
    var peek: UInt8? { at < raw.count ? raw[at] : nil }

    /// The argument of a head of major type `major` in its shortest form.
    mutating func head(major: UInt8) -> UInt64? {
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
    mutating func text(_ expected: String) -> Bool {
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
    mutating func byteString() -> [UInt8]? {
        let saved = at
        guard let length = head(major: 2), length <= UInt64(raw.count - at) else {
            at = saved
            return nil
        }
        at += Int(length)
        return Array(raw[(at - Int(length))..<at])
    }

    /// A 32-byte string, read without a copy of its bytes.
    mutating func bytes32() -> Bytes32? {
        let saved = at
        guard head(major: 2) == 32, at + 32 <= raw.count, let value = Bytes32(raw[at..<(at + 32)]) else {
            at = saved
            return nil
        }
        at += 32
        return value
    }

    /// A simple value's byte (false 0xF4, true 0xF5, null 0xF6).
    mutating func simple() -> UInt8? {
        guard at < raw.count, raw[at] >= 0xF4, raw[at] <= 0xF6 else { return nil }
        at += 1
        return raw[at - 1]
    }
}

enum Codec {
    static func u64(_ n: UInt64) -> [UInt8] { LogStore.encodeU64(n) }

    static func readU64(_ b: ArraySlice<UInt8>) -> UInt64 { b.reduce(0) { $0 << 8 | UInt64($1) } }

    static func b32(_ b: ArraySlice<UInt8>, _ what: String) throws -> Bytes32 {
        guard let v = Bytes32(b) else { throw ProjectionError.corrupt("\(what) of \(b.count) bytes") }
        return v
    }

    /// 32 bytes read in place (a key's part inside a scan).
    static func b32(_ raw: UnsafeRawBufferPointer, _ what: String) throws -> Bytes32 {
        guard let v = Bytes32(raw) else { throw ProjectionError.corrupt("\(what) of \(raw.count) bytes") }
        return v
    }

    static func cbor(_ v: CBORValue) -> [UInt8] { CBOREncoder.encode(v) }

    /// `what` names the value in the error; built only on a failure (a
    /// chat page reads a payload per message).
    static func decode(_ raw: [UInt8], _ what: @autoclosure () -> String) throws -> CBORValue {
        do { return try CBORDecoder.decode(raw) } catch { throw ProjectionError.corrupt("\(what()): \(error)") }
    }

    static func key32(_ v: Bytes32?) -> CBORValue { v.map { .bytes($0.bytes) } ?? .null }
}

extension CBORValue {
    var id32: Bytes32? { bytesValue.flatMap { Bytes32($0) } }
}
