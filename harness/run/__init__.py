"""The run stage: the plan, server processes, the workload client, profiling, the environment, and
`execute.run_scenario`, which writes the run directory as it goes."""
