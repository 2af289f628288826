"""The verdict stage: a scenario's rules evaluated on a run directory (`rules`), the statistics they
rest on (`stats`), and the comparison of two stored runs (`compare`)."""
