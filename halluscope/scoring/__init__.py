"""Pure scoring functions (entropies, clustering, SBC, FEWL, PHR); imports nothing of halluscope."""
