"""The createRuntime/poststop hook entry: standard library only."""
