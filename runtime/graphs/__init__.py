"""Static-shape step graphs per KV capacity (built from weights, split by dependence, or cut from an
IR) and the steps that drive them once compiled."""
