/// The big-endian bytes of `n`: the key form of sequence numbers, arrival
/// positions and counters, whose bytewise order is their numeric order.
/// Built by `reserveCapacity` and `append`, which are specialised where
/// they are used (not `Array(unsafeUninitializedCapacity:)`, which calls the
/// standard library's unspecialised allocator on every call).
@inlinable public func bigEndianBytes(_ n: UInt64) -> [UInt8] {
    var out: [UInt8] = []
    out.reserveCapacity(8)
    withUnsafeBytes(of: n.bigEndian) { out.append(contentsOf: $0) }
    return out
}

/// Appends the big-endian bytes of `n` to `out` (a key built in place).
@inlinable public func appendBigEndian(_ n: UInt64, to out: inout [UInt8]) {
    withUnsafeBytes(of: n.bigEndian) { out.append(contentsOf: $0) }
}
