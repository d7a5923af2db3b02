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
