"""Running a verified repo's code: delegation to torch.hub, the weights guard, the runtime
guard (a record and a seatbelt, in-process) and kernel confinement (``safehub run
--confine``)."""
