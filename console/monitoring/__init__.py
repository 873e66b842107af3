"""Live monitoring in the console: the /monitoring/ page and the /ws/metrics/ stream, fed by one engine sampler."""
