"""The SDK's own error types: each names the bad value, what was expected and the fix."""


class QsaError(Exception):
    """Base class of every error qsa raises on bad input."""


class FormatError(QsaError, ValueError):
    """A model file, checkpoint or artifact that is truncated, altered or of the wrong kind."""


class ConfigError(QsaError, ValueError):
    """A configuration value that is out of range or inconsistent."""


class AudioError(QsaError, ValueError):
    """Audio input that cannot be processed (empty, non-finite, unreadable, ...)."""
