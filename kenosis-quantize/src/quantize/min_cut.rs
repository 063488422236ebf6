//! Minimum s-t cut of a small flow network with real capacities (Dinic's algorithm, Dinic
//! 1970, "Algorithm for solution of a problem of maximum flow in networks with power
//! estimation"): the exact solver of the two-label placement in [`super::domain`].

use std::collections::VecDeque;

/// Capacities below this count as zero (the costs are sums of products of element counts).
const EPSILON: f64 = 1e-9;

/// A directed network on nodes `0..n`; edges are stored in pairs (edge, its reverse).
#[derive(Debug)]
pub struct Network {
    /// Per node, the indices of its outgoing edges (reverse edges included).
    adjacent: Vec<Vec<usize>>,
    /// Per edge: (head, residual capacity).
    edges: Vec<(usize, f64)>,
}

impl Network {
    /// A network of `n` nodes and no edge.
    pub fn new(n: usize) -> Self {
        Self {
            adjacent: vec![Vec::new(); n],
            edges: Vec::new(),
        }
    }

    /// Adds a node, returning its index.
    pub fn add_node(&mut self) -> usize {
        self.adjacent.push(Vec::new());
        self.adjacent.len() - 1
    }

    /// Adds the edge `from → to` with `capacity` (`f64::INFINITY` for one never cut);
    /// capacities at or below zero add nothing.
    pub fn add_edge(&mut self, from: usize, to: usize, capacity: f64) {
        if capacity <= EPSILON || from == to {
            return;
        }
        self.adjacent[from].push(self.edges.len());
        self.edges.push((to, capacity));
        self.adjacent[to].push(self.edges.len());
        self.edges.push((from, 0.0));
    }

    /// Pushes a maximum flow from `source` to `sink` and returns the nodes on the source
    /// side of a minimum cut: those still reachable from `source` in the residual network
    /// (the smallest such side, so ties fall to the sink side).
    pub fn source_side(mut self, source: usize, sink: usize) -> Vec<bool> {
        loop {
            let level = self.levels(source);
            if level[sink].is_none() {
                break;
            }
            let mut next = vec![0; self.adjacent.len()];
            while self.augment(source, sink, f64::INFINITY, &level, &mut next) > EPSILON {}
        }
        self.levels(source).iter().map(Option::is_some).collect()
    }

    /// Breadth-first distances from `source` over edges with residual capacity.
    fn levels(&self, source: usize) -> Vec<Option<usize>> {
        let mut level = vec![None; self.adjacent.len()];
        level[source] = Some(0);
        let mut queue = VecDeque::from([source]);
        while let Some(u) = queue.pop_front() {
            for &e in &self.adjacent[u] {
                let (v, capacity) = self.edges[e];
                if capacity > EPSILON && level[v].is_none() {
                    level[v] = level[u].map(|l| l + 1);
                    queue.push_back(v);
                }
            }
        }
        level
    }

    /// One blocking-flow augmenting path from `u` along increasing levels, at most `limit`.
    fn augment(
        &mut self,
        u: usize,
        sink: usize,
        limit: f64,
        level: &[Option<usize>],
        next: &mut [usize],
    ) -> f64 {
        if u == sink {
            return limit;
        }
        while next[u] < self.adjacent[u].len() {
            let e = self.adjacent[u][next[u]];
            let (v, capacity) = self.edges[e];
            if capacity > EPSILON && level[v] == level[u].map(|l| l + 1) {
                let pushed = self.augment(v, sink, limit.min(capacity), level, next);
                if pushed > EPSILON {
                    self.edges[e].1 -= pushed;
                    self.edges[e ^ 1].1 += pushed;
                    return pushed;
                }
            }
            next[u] += 1;
        }
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::Network;

    #[test]
    fn the_source_side_is_the_smallest_of_a_minimum_cut() {
        let (s, a, b, t) = (0, 1, 2, 3);
        // Max flow 5: every edge out of s is saturated, so only s stays on its side.
        let mut n = Network::new(4);
        n.add_edge(s, a, 3.0);
        n.add_edge(s, b, 2.0);
        n.add_edge(a, b, 1.0);
        n.add_edge(a, t, 2.0);
        n.add_edge(b, t, 3.0);
        assert_eq!(n.source_side(s, t), vec![true, false, false, false]);

        // a can never be on the source side (a → t is infinite), so s → a (3) is cut; b is
        // cheaper on the source side (b → t: 1) than off it (s → b: 5).
        let mut n = Network::new(4);
        n.add_edge(s, a, 3.0);
        n.add_edge(a, t, f64::INFINITY);
        n.add_edge(s, b, 5.0);
        n.add_edge(b, t, 1.0);
        n.add_edge(a, b, 0.5);
        assert_eq!(n.source_side(s, t), vec![true, false, true, false]);
    }
}
