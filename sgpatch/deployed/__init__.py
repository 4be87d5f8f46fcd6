"""What is installed, here or on a host over ssh: the probe, how it is run, verify --installed/--ssh, doctor."""
