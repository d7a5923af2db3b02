import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusProjections
import Foundation

/// A typed profile edit: `node.setProfile(.city("Lisbon"))`. Each case
/// carries the value its field's schema takes (Specs/events.md §6.2);
/// `.clear(field)` sets the field to null.
public enum ProfileEdit: Sendable, Hashable {
    /// The display name: 1 to 100 UTF-8 bytes.
    case name(String)
    /// Free text about the user: up to 1000 UTF-8 bytes.
    case bio(String)
    /// Up to 100 UTF-8 bytes.
    case city(String)
    /// Up to 32 UTF-8 bytes, as the user writes it.
    case gender(String)
    /// Up to 200 UTF-8 bytes.
    case website(String)
    /// Year, month and day are required.
    case birthday(DateComponents)
    /// One of this user's live pictures.
    case avatar(PictureID)
    /// Sets the field to null, whatever its type.
    case clear(ProfileField)

    /// The profile field this edit sets or clears.
    public var field: ProfileField {
        switch self {
        case .name: .name
        case .bio: .bio
        case .city: .city
        case .gender: .gender
        case .website: .website
        case .birthday: .birthday
        case .avatar: .avatar
        case .clear(let field): field
        }
    }

    /// The register value, or nil to clear; a birthday without a year,
    /// month and day is refused.
    func value() throws -> CBORValue? {
        switch self {
        case .name(let s), .bio(let s), .city(let s), .gender(let s), .website(let s): return CBORValue.text(s)
        case .birthday(let d):
            guard let y = d.year, let m = d.month, let day = d.day else { throw NodeError.refused(.incompleteDate) }
            return CBORValue.text(String(format: "%04d-%02d-%02d", y, m, day))
        case .avatar(let picture): return CBORValue.bytes(picture.bytes)
        case .clear: return nil
        }
    }
}

extension Node {
    /// Sets (or clears) one profile field of this user.
    @discardableResult
    public func setProfile(_ edit: ProfileEdit) async throws -> Mutation<UserID> {
        try await setProfile(edit.field, try edit.value())
    }
}

extension ProfileView {
    private func text(_ field: ProfileField) -> String? { self.field(field.rawValue)?.textValue }

    /// The display name, or `nil` when unset or cleared.
    public var name: String? { text(.name) }
    /// The bio text, or `nil` when unset or cleared.
    public var bio: String? { text(.bio) }
    /// The city, or `nil` when unset or cleared.
    public var city: String? { text(.city) }
    /// The gender as the user wrote it, or `nil` when unset or cleared.
    public var gender: String? { text(.gender) }
    /// The website, or `nil` when unset or cleared.
    public var website: String? { text(.website) }
    /// The birthday as year, month and day.
    public var birthday: DateComponents? {
        guard let s = text(.birthday) else { return nil }
        let parts = s.split(separator: "-").compactMap { Int($0) }
        guard parts.count == 3 else { return nil }
        return DateComponents(year: parts[0], month: parts[1], day: parts[2])
    }
}
