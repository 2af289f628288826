"""The run stage: the plan, server processes and launches, the workload client, one trial, profiling,
the environment, and `execute.run_scenario`, which writes the run directory as it goes."""
