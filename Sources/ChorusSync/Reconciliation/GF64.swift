import CGF64
import ChorusParallel
import Foundation

/// Arithmetic in GF(2^64) = GF(2)[x] / (x^64 + x^4 + x^3 + x + 1), the field
/// of sketch reconciliation (Specs/sync.md §4.2.2): bit i of a `UInt64` is the
/// coefficient of x^i; addition is XOR.
package enum GF64 {

    /// The product of `a` and `b`: a carry-less multiply (the CPU's
    /// instruction where it has one) reduced modulo the field polynomial.
    @inline(__always)
    package static func mul(_ a: UInt64, _ b: UInt64) -> UInt64 { chorus_gf64_mul(a, b) }

    /// a².
    package static func square(_ a: UInt64) -> UInt64 { mul(a, a) }

    /// a^(2^64 − 2): the inverse of a nonzero element.
    package static func inverse(_ a: UInt64) -> UInt64 {
        precondition(a != 0, "zero has no inverse")
        // 2^64 − 2 = 0b111…10: square and multiply over 63 ones, then square.
        var result: UInt64 = 1
        for _ in 0..<63 { result = mul(square(result), a) }
        return square(result)
    }

    /// a^n.
    package static func power(_ a: UInt64, _ n: UInt64) -> UInt64 {
        var result: UInt64 = 1, base = a, e = n
        while e > 0 {
            if e & 1 == 1 { result = mul(result, base) }
            base = square(base)
            e >>= 1
        }
        return result
    }
}

/// Polynomials over GF(2^64), coefficients lowest degree first, with no
/// trailing zeros (the zero polynomial is empty).
struct GF64Polynomial: Equatable {
    var c: [UInt64]

    init(_ c: [UInt64]) {
        self.c = c
        trim()
    }

    var degree: Int { c.count - 1 }
    var isZero: Bool { c.isEmpty }

    mutating func trim() { while let last = c.last, last == 0 { c.removeLast() } }

    /// The points among `points` where self is zero, evaluated on all cores.
    func zeros(among points: [UInt64]) -> [UInt64] {
        guard degree >= 1, !points.isEmpty else { return [] }
        let coefficients = c
        let parts = max(1, min(ProcessInfo.processInfo.activeProcessorCount, points.count / 256))
        let ranges = (0..<parts).map { p in (points.count * p / parts)..<(points.count * (p + 1) / parts) }
        let found = parallelMap(ranges, chunk: 1) { range -> [UInt64] in
            let slice = Array(points[range])
            var values = [UInt64](repeating: 0, count: slice.count)
            coefficients.withUnsafeBufferPointer { cs in
                slice.withUnsafeBufferPointer { xs in
                    values.withUnsafeMutableBufferPointer { out in
                        guard let c = cs.baseAddress, let x = xs.baseAddress, let o = out.baseAddress else { return }
                        chorus_gf64_evaluate(c, cs.count - 1, x, xs.count, o)
                    }
                }
            }
            return zip(slice, values).compactMap { $1 == 0 ? $0 : nil }
        }
        return found.flatMap { $0 }
    }

    func evaluate(_ x: UInt64) -> UInt64 {
        var acc: UInt64 = 0
        for coefficient in c.reversed() { acc = GF64.mul(acc, x) ^ coefficient }
        return acc
    }

    /// The remainder of self divided by `m` (m nonzero).
    func remainder(_ m: GF64Polynomial) -> GF64Polynomial {
        var r = c
        let lead = GF64.inverse(m.c[m.degree])
        var top = r.count - 1
        while top >= m.degree {
            let q = GF64.mul(r[top], lead)
            if q != 0 {
                let shift = top - m.degree
                for i in 0...m.degree { r[shift + i] ^= GF64.mul(q, m.c[i]) }
            }
            top -= 1
        }
        return GF64Polynomial(Array(r.prefix(m.degree)))
    }

    /// The quotient of self divided by `m`, when m divides it.
    func quotient(_ m: GF64Polynomial) -> GF64Polynomial {
        var r = c
        let lead = GF64.inverse(m.c[m.degree])
        var q = [UInt64](repeating: 0, count: max(0, degree - m.degree + 1))
        var top = r.count - 1
        while top >= m.degree {
            let factor = GF64.mul(r[top], lead)
            let shift = top - m.degree
            q[shift] = factor
            if factor != 0 { for i in 0...m.degree { r[shift + i] ^= GF64.mul(factor, m.c[i]) } }
            top -= 1
        }
        return GF64Polynomial(q)
    }

    func times(_ other: GF64Polynomial) -> GF64Polynomial {
        guard !isZero, !other.isZero else { return GF64Polynomial([]) }
        var out = [UInt64](repeating: 0, count: c.count + other.c.count - 1)
        for (i, a) in c.enumerated() where a != 0 {
            for (j, b) in other.c.enumerated() { out[i + j] ^= GF64.mul(a, b) }
        }
        return GF64Polynomial(out)
    }

    /// self² mod m: squaring is linear in characteristic 2 (each
    /// coefficient squared moves to twice its degree).
    func squareMod(_ m: GF64Polynomial) -> GF64Polynomial {
        var out = [UInt64](repeating: 0, count: max(0, 2 * c.count - 1))
        for (i, a) in c.enumerated() { out[2 * i] = GF64.square(a) }
        return GF64Polynomial(out).remainder(m)
    }

    static func gcd(_ a: GF64Polynomial, _ b: GF64Polynomial) -> GF64Polynomial {
        var a = a, b = b
        while !b.isZero { (a, b) = (b, a.remainder(b)) }
        return a
    }

    /// The distinct roots of self when it is a product of distinct linear
    /// factors; nil when it is not (a root missing from GF(2^64) or
    /// repeated), or when splitting it fails too often (a hostile input).
    func distinctRoots() -> [UInt64]? {
        guard degree >= 1 else { return degree == 0 ? [] : nil }
        // x^(2^64) ≡ x (mod self) exactly when every root lies in the field;
        // a squarefree self then has `degree` distinct roots.
        let x = GF64Polynomial([0, 1])
        var y = x.remainder(self)
        for _ in 0..<64 { y = y.squareMod(self) }
        guard y == x.remainder(self) else { return nil }
        let derivative = GF64Polynomial(c.enumerated().dropFirst().map { $0.offset % 2 == 1 ? $0.element : 0 })
        guard GF64Polynomial.gcd(self, derivative).degree == 0 else { return nil }
        var out: [UInt64] = []
        var attempts = 0
        guard split(&out, attempts: &attempts) else { return nil }
        return out
    }

    /// Splits self (a product of distinct linear factors) with the trace
    /// map: for β ≠ 0, gcd(self, Tr(βx)) takes the roots r with Tr(βr) = 0.
    private func split(_ out: inout [UInt64], attempts: inout Int) -> Bool {
        if degree == 1 {
            out.append(GF64.mul(c[0], GF64.inverse(c[1])))
            return true
        }
        while attempts < 64 * 64 {
            attempts += 1
            let beta = GF64.power(3, UInt64(attempts))
            var y = GF64Polynomial([0, beta]).remainder(self)
            var trace = y
            for _ in 1..<64 {
                y = y.squareMod(self)
                trace = GF64Polynomial(zipAdd(trace.c, y.c))
            }
            let g = GF64Polynomial.gcd(self, trace)
            if g.degree >= 1, g.degree < degree {
                return g.split(&out, attempts: &attempts) && quotient(g).split(&out, attempts: &attempts)
            }
        }
        return false
    }
}

func zipAdd(_ a: [UInt64], _ b: [UInt64]) -> [UInt64] {
    var out = a.count >= b.count ? a : b
    for (i, v) in (a.count >= b.count ? b : a).enumerated() { out[i] ^= v }
    return out
}
