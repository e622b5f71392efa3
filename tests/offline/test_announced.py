"""Which failure of a run is announced (``nexusflow/flows/notify.py``) is decided by its class,
never by its name: a subclass is announced as its base, a stranger's error named like ours is
not. No run and no server: the runs that announce are tests/server/run/test_agent_run.py."""

from nexusflow import AuthRequired, QuotaExhausted
from nexusflow.errors import BudgetExceeded
from nexusflow.flows.notify import announced


class ExpiredLogin(AuthRequired):
    """A user's own kind of login failure: announced as every ``AuthRequired`` is."""


class SpentWindow(QuotaExhausted):
    pass


class OtherAuthRequired(Exception):
    """Named like ours, and nothing of ours: a name comparison would announce it."""


OtherAuthRequired.__name__ = "AuthRequired"


def test_a_failure_is_announced_by_its_class_not_its_name():
    assert announced(AuthRequired("claude", "please log in"))
    assert announced(QuotaExhausted("claude"))
    assert announced(ExpiredLogin("claude", "token expired")), "a subclass is announced as its base"
    assert announced(SpentWindow("codex"))
    assert not announced(OtherAuthRequired("a stranger's error"))
    assert not announced(BudgetExceeded("s", "$2.00"))
    assert not announced(None)
