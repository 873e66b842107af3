"""Reading the engine's settings from the environment: strict values, trace start-up, header rules."""
