import LegacyProtocol
import NIOCore
import Synchronization

extension FeedbackKey {
    /// The feedback list the key's token would be on.
    public var list: FeedbackListFilter.List {
        FeedbackListFilter.List(tenant: self.tenant, environment: self.environment)
    }
}

/// Which tokens may be on a feedback list: what lets a 200 skip the store (a 200 takes its token
/// off the list if it was there: docs/feedback.md#on-the-list).
///
/// Almost every upstream answer is a 200, and almost no token that gets one is on a feedback
/// list. Without this filter every 200 would queue a `DELETE` for its token. With it, a 200 goes
/// to the store only when its token's fingerprint is in the filter of its list.
///
/// The filter may say "maybe" for a token that is not on the list (another token with the same
/// 64-bit fingerprint, or an entry that was served or removed since): that costs one `DELETE`
/// that removes nothing. It never says "no" for a token that is on the list, as long as the
/// store keeps it current:
/// - the store loads every entry's fingerprint when it opens;
/// - a 410 adds its token before the store writes the entry;
/// - a store shared by several instances adds the entries the others write (PostgreSQL: a
///   notification per committed batch);
/// - the store rebuilds the filter from its entries from time to time (its maintenance sweep),
///   so fingerprints of entries that were served, removed or expired do not pile up. Tokens
///   added while a rebuild reads the table are kept.
///
/// Memory: about 16 bytes per entry on the lists (a million entries: about 16 MB; docs/feedback.md
/// has the measured open time and RSS).
public final class FeedbackListFilter: Sendable {
    /// One feedback list: a tenant's, in one environment.
    public struct List: Hashable, Sendable {
        public var tenant: String
        public var environment: APNsEnvironment

        public init(tenant: String, environment: APNsEnvironment) {
            self.tenant = tenant
            self.environment = environment
        }
    }

    private struct State {
        var fingerprints: [List: Set<UInt64>] = [:]
        /// While a rebuild reads the store: what it has read so far, and what was added meanwhile.
        var rebuilding: [List: Set<UInt64>]?
        var addedDuringRebuild: [List: Set<UInt64>] = [:]
    }

    private let state = Mutex(State())

    public init() {}

    /// Whether `token` may be on `list`. `false` means it certainly is not.
    public func mayContain(_ token: ByteBuffer, on list: List) -> Bool {
        let fingerprint = Self.fingerprint(token)
        return self.state.withLock { state in
            state.fingerprints[list]?.contains(fingerprint) ?? false
        }
    }

    /// `token` is (about to be) on `list`.
    public func insert(_ token: ByteBuffer, on list: List) {
        self.insert(fingerprint: Self.fingerprint(token), on: list)
    }

    /// Adds a fingerprint another instance computed with ``fingerprint(_:)``.
    public func insert(fingerprint: UInt64, on list: List) {
        self.state.withLock { state in
            state.fingerprints[list, default: []].insert(fingerprint)
            if state.rebuilding != nil {
                state.addedDuringRebuild[list, default: []].insert(fingerprint)
            }
        }
    }

    /// How many fingerprints the filter holds, over all lists.
    public var count: Int {
        self.state.withLock { state in state.fingerprints.values.reduce(0) { $0 + $1.count } }
    }

    // MARK: Rebuilding

    /// Replaces the filter with the store's entries: `read` calls `found` for each entry it
    /// reads. The old filter answers until `read` returns, and tokens inserted meanwhile (a 410
    /// committed while the table is read) are kept. If `read` throws, the old filter stays.
    public func rebuild(_ read: (_ found: (ByteBuffer, List) -> Void) async throws -> Void) async throws {
        self.state.withLock { state in
            state.rebuilding = [:]
            state.addedDuringRebuild = [:]
        }
        do {
            try await read { token, list in
                let fingerprint = Self.fingerprint(token)
                self.state.withLock { state in
                    _ = state.rebuilding?[list, default: []].insert(fingerprint)
                }
            }
        } catch {
            self.state.withLock { state in
                state.rebuilding = nil
                state.addedDuringRebuild = [:]
            }
            throw error
        }
        self.state.withLock { state in
            guard var rebuilt = state.rebuilding else { return }
            for (list, added) in state.addedDuringRebuild {
                rebuilt[list, default: []].formUnion(added)
            }
            state.fingerprints = rebuilt
            state.rebuilding = nil
            state.addedDuringRebuild = [:]
        }
    }

    // MARK: Fingerprints

    /// 64-bit FNV-1a of the token's bytes: cheap, and the same in every process (instances
    /// sharing a store exchange fingerprints).
    public static func fingerprint(_ token: ByteBuffer) -> UInt64 {
        token.withUnsafeReadableBytes { bytes in
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325
            for byte in bytes {
                hash ^= UInt64(byte)
                hash &*= 0x0000_0100_0000_01b3
            }
            return hash
        }
    }
}
