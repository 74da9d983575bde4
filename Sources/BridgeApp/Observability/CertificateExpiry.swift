import BridgeServer
import CoreMetrics
import Foundation
import NIOSSL
import SwiftASN1
import Synchronization
import UpstreamAPNs
import X509

/// When the certificates the bridge depends on expire, as the gauge
/// `apns_bridge_certificate_expiry_timestamp_seconds{certificate}` (Unix time) and for the
/// status page: the legacy listeners' certificate (`tls.certificate`), the earliest of the
/// client CAs (`tls.clientCA`), and each upstream certificate (`credential.NAME`; signing keys
/// do not expire). Set at start and on every reload.
final class CertificateExpiry: Sendable {

    private struct State {
        var dates: [String: Date] = [:]
        var gauges: [String: CoreMetrics.Gauge] = [:]
    }

    private let state = Mutex(State())
    private let factory: any MetricsFactory

    /// `serve` makes one: the reloader updates it, the status page reads it.
    init(factory: any MetricsFactory = MetricsSystem.factory) {
        self.factory = factory
    }

    /// The expiry dates now, by certificate name.
    var dates: [String: Date] {
        self.state.withLock { $0.dates }
    }

    /// Replaces every date (names no longer present disappear from the metric).
    func update(_ dates: [String: Date]) {
        let removed: [CoreMetrics.Gauge] = self.state.withLock { state in
            var removed: [CoreMetrics.Gauge] = []
            for (name, gauge) in state.gauges where dates[name] == nil {
                removed.append(gauge)
                state.gauges[name] = nil
            }
            for (name, date) in dates {
                let gauge =
                    state.gauges[name]
                    ?? CoreMetrics.Gauge(
                        label: "apns_bridge_certificate_expiry_timestamp_seconds",
                        dimensions: [("certificate", name)],
                        factory: self.factory
                    )
                state.gauges[name] = gauge
                gauge.record(date.timeIntervalSince1970)
            }
            state.dates = dates
            return removed
        }
        for gauge in removed {
            gauge.destroy()
        }
    }

    /// The dates of the settings' certificates, with the upstream credentials as opened.
    static func dates(_ settings: BridgeSettings, credentials: [String: APNsCredentials]) -> [String: Date] {
        var dates: [String: Date] = [:]
        if let leaf = settings.gateway.tls.certificateChain.first, let date = Self.notValidAfter(leaf) {
            dates["tls.certificate"] = date
        }
        if let earliest = settings.gateway.tls.clientCertificateAuthorities.compactMap(Self.notValidAfter).min() {
            dates["tls.clientCA"] = earliest
        }
        for (name, credential) in credentials {
            if case .certificate(let chain, _) = credential, let leaf = chain.first, let date = Self.notValidAfter(leaf)
            {
                dates["credential.\(name)"] = date
            }
        }
        return dates
    }

    static func notValidAfter(_ certificate: NIOSSLCertificate) -> Date? {
        guard let der = try? certificate.toDERBytes(), let parsed = try? Certificate(derEncoded: der) else {
            return nil
        }
        return parsed.notValidAfter
    }
}
