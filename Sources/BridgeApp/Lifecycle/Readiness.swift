import BridgeCore
import BridgeForwarding
import BridgeServer
import BridgeStores
import UpstreamAPNs

/// Readiness (`/readyz`: a usable upstream connection), health (`/healthz`: the store answers)
/// and the gauges read at each scrape.
struct Readiness: Sendable {
    var forwarder: ReloadableForwarder
    var tenants: ReloadableTenantResolver
    var store: StoreHealth
    var gauges: BridgeGauges

    /// The environments whose connections readiness depends on: the default one and those
    /// configured for tenants.
    var environments: Set<APNsEnvironment> {
        let tenants = self.tenants.current
        return Set(tenants.rules.compactMap(\.environment)).union([tenants.defaultEnvironment])
    }

    /// Opens the upstream connections readiness depends on.
    func warmUp() {
        let environments = self.environments
        for member in self.forwarder.members.values {
            for environment in environments {
                member.client.warmUp(environment)
            }
        }
    }

    var isReady: Bool {
        let environments = self.environments
        return self.forwarder.members.values.allSatisfy { member in
            environments.allSatisfy { member.client.hasUsableConnection($0) }
        }
    }

    func probes(reloader: ConfigurationReloader, statusPage: StatusPage?, pushLog: PushLog?) -> AdminServer.Probes {
        var renderStatusPage: (@Sendable (String) async -> String)?
        if let statusPage {
            renderStatusPage = { uri in
                self.updateGauges()
                return await statusPage.render(uri: uri)
            }
        }
        return AdminServer.Probes(
            isReady: {
                if self.isReady { return true }
                self.warmUp()  // a probe that finds no connection asks for one (the pool backs off)
                return false
            },
            storeProblem: {
                guard let outage = self.store.currentOutage else { return nil }
                return "the store has not answered for \(ContinuousClock.now - outage.since): \(outage.lastError)"
            },
            beforeScrape: { self.updateGauges() },
            reload: {
                let outcome = await reloader.reload(trigger: "admin")
                return (outcome.refused == nil, outcome.description)
            },
            statusPage: renderStatusPage,
            pushLog: pushLog
        )
    }

    /// The gauges read rather than counted: upstream connections by environment and state, and
    /// whether the store answers.
    func updateGauges() {
        self.gauges.store(reachable: self.store.currentOutage == nil, writesWaiting: self.store.writesWaiting)
        for environment in APNsEnvironment.allCases {
            let counts = self.forwarder.members.values.reduce(APNsClient.ConnectionCounts()) {
                $0 + $1.client.connectionCounts(environment)
            }
            self.gauges.upstreamConnections(environment, counts)
        }
    }
}
