import ChorusCrypto
import ChorusEvents
import Foundation
import Testing

/// Ids an app can keep: Identifiable, Codable and LosslessStringConvertible as hex.
@Suite("typed ids")
struct TypedIDTests {
    @Test("an id encodes as its hex, decodes from hex in either case, refuses anything else, and parses from its description")
    func idsRoundTripAsHex() throws {
        let user = UserID(Bytes32(hex: String(repeating: "ab", count: 32))!)
        let encoded = try JSONEncoder().encode([user])
        #expect(String(decoding: encoded, as: UTF8.self) == #"["\#(user.hex)"]"#)
        #expect(try JSONDecoder().decode([UserID].self, from: encoded) == [user])
        #expect(try JSONDecoder().decode([UserID].self, from: Data(#"["\#(user.hex.uppercased())"]"#.utf8)) == [user])
        #expect(throws: DecodingError.self) { try JSONDecoder().decode([UserID].self, from: Data(#"["abc"]"#.utf8)) }
        #expect(UserID(user.description) == user && UserID("not hex") == nil)
        #expect(user.id == user)
        let pictures: [PictureID] = [PictureID(Bytes32(hex: String(repeating: "01", count: 32))!)]
        #expect(pictures.map(\.id) == pictures)
    }
}
