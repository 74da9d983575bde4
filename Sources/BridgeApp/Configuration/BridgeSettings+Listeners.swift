import BridgeCore
import BridgeServer
import Foundation
import NIOCore
import NIOSSL

/// The legacy listeners: their TLS (files, trust, versions), limits and timeouts, and how often
/// the configuration is watched for changes.
extension BridgeSettings {
    static func readListenerTLS(_ settings: SettingsReader) throws -> (TLSFiles, LegacyTLSConfiguration) {
        let files = TLSFiles(
            certificate: try settings.requiredFile(
                .tlsCertificate,
                why: "the PEM certificate (chain) the legacy ports present"
            ),
            privateKey: try settings.requiredFile(.tlsPrivateKey, why: "the PEM private key of tls.certificate"),
            clientCAs: try settings.list(.tlsClientCA).map { path in
                guard FileManager.default.isReadableFile(atPath: path) else {
                    throw ConfigurationError(.tlsClientCA, "cannot read the file \(path)")
                }
                return path
            }
        )
        var tls = try Self.loadTLS(files)
        tls.pinnedFingerprints = Set(settings.list(.tlsPinnedFingerprints).map(TenantRule.normalizedFingerprint))
        for fingerprint in tls.pinnedFingerprints where fingerprint.count != 64 {
            throw ConfigurationError(
                key: ConfigurationKey.tlsPinnedFingerprints.name,
                "\(fingerprint) is not a SHA-256 fingerprint (64 hex digits)"
            )
        }
        tls.allowTLS13 = try settings.bool(.tlsAllowTLS13, default: tls.allowTLS13)
        tls.allowLegacyTLS = try settings.bool(.tlsAllowLegacyTLS, default: tls.allowLegacyTLS)
        tls.closeNotifyWait = try settings.timeAmount(.tlsCloseNotifyWait, default: tls.closeNotifyWait)
        return (files, tls)
    }

    /// `nil`: watching is off (only SIGHUP or `apns-bridge reload`).
    static func readWatchInterval(_ settings: SettingsReader) throws -> Duration? {
        // `tls.reloadIntervalSeconds` is the name of earlier versions.
        let key: ConfigurationKey =
            settings.string(.reloadWatchInterval) == nil && settings.string(.tlsReloadInterval) != nil
            ? .tlsReloadInterval : .reloadWatchInterval
        let interval = try settings.duration(key, default: .seconds(10))
        return interval == .zero ? nil : interval
    }

    /// The load balancers that send PROXY protocol headers (both listeners).
    /// `any` trusts every peer's header, on purpose (a listener only the balancers can reach);
    /// a network of every address (`0.0.0.0/0`, `::/0`) is refused, since it would let any
    /// client claim any address by mistake.
    static func readProxyProtocol(_ settings: SettingsReader) throws -> ProxyProtocolPolicy {
        let networks = try settings.list(.proxyProtocolLoadBalancers).flatMap { text -> [IPNetwork] in
            if text.lowercased() == "any" {
                return [IPNetwork("0.0.0.0/0")!, IPNetwork("::/0")!]
            }
            guard let network = IPNetwork(text) else {
                throw ConfigurationError(
                    key: ConfigurationKey.proxyProtocolLoadBalancers.name,
                    "\(text) is not an IP address or a CIDR network (10.0.0.0/8, fd00::/8)"
                )
            }
            guard network.prefixLength > 0 else {
                throw ConfigurationError(
                    key: ConfigurationKey.proxyProtocolLoadBalancers.name,
                    "\(text) is every address: any client could then claim any address in a PROXY header; list the balancers, or write `any` if only they can reach these listeners"
                )
            }
            return [network]
        }
        return ProxyProtocolPolicy(loadBalancers: networks)
    }

    static func readGateway(_ settings: SettingsReader, tls: LegacyTLSConfiguration) throws -> GatewayConfiguration {
        var gateway = GatewayConfiguration(tls: tls)
        gateway.proxyProtocol = try Self.readProxyProtocol(settings)
        (gateway.host, gateway.port) = try settings.address(.gatewayListen, default: "\(gateway.host):\(gateway.port)")!
        gateway.maximumConnections = try settings.int(.gatewayMaximumConnections, default: gateway.maximumConnections)
        gateway.maximumHandshakes = try settings.int(.gatewayMaximumHandshakes, default: gateway.maximumHandshakes)
        gateway.maximumHandshakesPerAddress = try settings.int(
            .gatewayMaximumHandshakesPerAddress,
            default: gateway.maximumHandshakesPerAddress
        )
        gateway.session.maximumInFlight = try settings.int(
            .gatewayMaximumInFlight,
            default: gateway.session.maximumInFlight
        )
        gateway.handshakeTimeout = try settings.timeAmount(.gatewayHandshakeTimeout, default: gateway.handshakeTimeout)
        let idle = try settings.timeAmount(.gatewayIdleTimeout, default: gateway.idleTimeout ?? .zero)
        gateway.idleTimeout = idle == .zero ? nil : idle
        gateway.shutdownGracePeriod = try settings.timeAmount(
            .gatewayShutdownGrace,
            default: gateway.shutdownGracePeriod
        )
        gateway.errorDrainTime = try settings.timeAmount(.gatewayErrorDrain, default: gateway.errorDrainTime)
        return gateway
    }

    static func readFeedback(_ settings: SettingsReader, tls: LegacyTLSConfiguration) throws -> FeedbackConfiguration {
        var feedback = FeedbackConfiguration(tls: tls)
        feedback.proxyProtocol = try Self.readProxyProtocol(settings)
        (feedback.host, feedback.port) = try settings.address(
            .feedbackListen,
            default: "\(feedback.host):\(feedback.port)"
        )!
        feedback.maximumConnections = try settings.int(
            .feedbackMaximumConnections,
            default: feedback.maximumConnections
        )
        feedback.maximumHandshakes = try settings.int(.feedbackMaximumHandshakes, default: feedback.maximumHandshakes)
        feedback.maximumHandshakesPerAddress = try settings.int(
            .feedbackMaximumHandshakesPerAddress,
            default: feedback.maximumHandshakesPerAddress
        )
        feedback.writeTimeout = try settings.timeAmount(.feedbackWriteTimeout, default: feedback.writeTimeout)
        feedback.closeDelay = try settings.timeAmount(.feedbackCloseDelay, default: feedback.closeDelay)
        feedback.drain.only32ByteTokens = try settings.bool(
            .feedbackOnly32ByteTokens,
            default: feedback.drain.only32ByteTokens
        )
        return feedback
    }

    /// Reads the listeners' certificate, key and client CAs (at start-up and on reload).
    package static func loadTLS(_ files: TLSFiles) throws -> LegacyTLSConfiguration {
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMFile(files.certificate)
        } catch {
            throw ConfigurationError(.tlsCertificate, "\(files.certificate) holds no PEM certificate: \(error)")
        }
        let key: NIOSSLPrivateKey
        do {
            key = try NIOSSLPrivateKey(file: files.privateKey, format: .pem)
        } catch {
            throw ConfigurationError(.tlsPrivateKey, "\(files.privateKey) holds no PEM private key")
        }
        var authorities: [NIOSSLCertificate] = []
        for path in files.clientCAs {
            do {
                authorities += try NIOSSLCertificate.fromPEMFile(path)
            } catch {
                throw ConfigurationError(.tlsClientCA, "\(path) holds no PEM certificate: \(error)")
            }
        }
        let configuration = LegacyTLSConfiguration(
            certificateChain: chain,
            privateKey: key,
            clientCertificateAuthorities: authorities
        )
        do {
            // What the listeners do at start: BoringSSL checks that the key is the certificate's.
            _ = try configuration.makeServerContext()
        } catch {
            throw ConfigurationError(
                key: "tls.privateKey",
                "\(files.privateKey) is not the private key of \(files.certificate) (\(error))"
            )
        }
        return configuration
    }
}
