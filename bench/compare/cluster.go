package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/gorun-hpc/gorun/scripts/cluster"
)

// The cluster scenarios run on the namespace cluster of scripts/cluster:
// hosts with their own hostnames, 2 Gbit/s links, a real sshd each. gorun
// and Open MPI start their ranks over ssh; Gloo's ranks are started in the
// hosts directly (cluster.sh exec).

// theCluster is the running cluster, nil when no cluster scenario runs.
var theCluster *cluster.Cluster

// startCluster brings up a cluster big enough for the selected scenarios,
// or drops them with the reason.
func startCluster(ctx context.Context, scs []scenario) []scenario {
	hosts := 0
	for _, sc := range scs {
		hosts = max(hosts, sc.hosts)
	}
	if hosts == 0 {
		return scs
	}
	c, err := cluster.Up(ctx, cluster.Options{Hosts: hosts, Rate: "2gbit", Prefix: "bench"})
	if err != nil {
		fmt.Fprintf(os.Stderr, "cluster scenarios left out: %v\n", err)
		var keep []scenario
		for _, sc := range scs {
			if sc.hosts == 0 {
				keep = append(keep, sc)
			}
		}
		return keep
	}
	theCluster = c
	return scs
}

// hostList is -H for a scenario: ranks/hosts slots on each host.
func hostList(sc scenario) string {
	var l []string
	for _, h := range theCluster.Hosts[:sc.hosts] {
		l = append(l, h.Name+":"+strconv.Itoa(sc.ranks/sc.hosts))
	}
	return strings.Join(l, ",")
}

// rankHost is the host of rank r (by slot, as -H places them).
func rankHost(sc scenario, r int) string {
	return theCluster.Hosts[r/(sc.ranks/sc.hosts)].Name
}

// clusterSubnet is the hosts' subnet, for Open MPI's interface selection.
func clusterSubnet() string {
	ip := theCluster.Hosts[0].IP
	return ip[:strings.LastIndexByte(ip, '.')] + ".0/24"
}

// openMPIClusterArgs is mpirun's command line across the cluster's hosts:
// ob1 with vader inside a host and tcp between hosts, launched over ssh.
func openMPIClusterArgs(mpirun string, sc scenario) []string {
	net := clusterSubnet()
	return []string{mpirun, "-n", strconv.Itoa(sc.ranks), "-H", hostList(sc), "--bind-to", "none",
		"--mca", "plm_rsh_agent", "ssh", "--mca", "pml", "ob1", "--mca", "btl", "self,vader,tcp",
		"--mca", "btl_tcp_if_include", net, "--mca", "oob_tcp_if_include", net,
		"-x", "OMPI_ALLOW_RUN_AS_ROOT", "-x", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM",
		"--mca", "mpi_yield_when_idle", "1"}
}

// clusterAgent runs argv in rank r's host.
func clusterAgent(sc scenario, r int, argv []string) []string {
	return append(append(theCluster.Agent(), rankHost(sc, r)), argv...)
}
