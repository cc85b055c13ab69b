//! The conversation driver: owns one conversation and runs its submissions one at a time.
