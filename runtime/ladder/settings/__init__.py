"""What a run is told, apart from the mechanism that carries it out: the run configuration
(``config``), the capacities and ladders, the schedules, the protocol (teacher-forced, greedy or
a forced text), the bound on B and whether a run fits the host's memory."""
