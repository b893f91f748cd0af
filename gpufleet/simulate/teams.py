"""Who uses the simulated fleet: the teams, their users (users.csv) and the odd accounts.

Some process owners are deliberately missing from users.csv (an external collaborator, a
user running processes with no allocation), so their samples are attributed `(unmapped)`.
"""

from __future__ import annotations

TEAMS = ("vision", "nlp", "speech", "research", "platform")
# Which teams submit the shared cluster's training jobs, and how often.
TRAINING_TEAMS = ("vision", "nlp", "speech", "research")
TRAINING_WEIGHTS = (0.35, 0.35, 0.15, 0.15)
OWNER_TEAMS = ("research", "speech")  # teams that own hosts (hosts.csv)

# Owners that are not in users.csv, so their samples are attributed to `(unmapped)`.
EXTERNAL_USER = "ext-jmorales"  # an external collaborator with Slurm allocations
EXTERNAL_ACCOUNT = "research"  # their Slurm account: the team that hosts them
ROGUE_UNMAPPED_USER = "tmpuser07"  # runs processes with no allocation
SERVICE_USER = "svc-infer"  # the inference service account (its allocations name a team)

_SURNAME_TEXT = (
    "chen kumar garcia smith nguyen mueller rossi tanaka silva kowalski novak haddad "
    "okafor larsen dubois yilmaz park ivanova fischer moreau santos ahmed berg costa "
    "weber sato lopez meyer khan jensen romano schmidt wang ali olsen reyes"
)
_SURNAMES = tuple(_SURNAME_TEXT.split())
_INITIALS = "abcdefghijklmnoprstvwy"


def users(gpus: int) -> list[tuple[str, str]]:
    """users.csv rows (user, team): the same number per team, more for a larger fleet."""
    per_team = max(3, min(30, gpus // 40))
    rows: list[tuple[str, str]] = []
    seen: set[str] = set()
    i = 0
    for team in TEAMS:
        for _ in range(per_team):
            name = f"{_INITIALS[i % len(_INITIALS)]}{_SURNAMES[(i * 7) % len(_SURNAMES)]}"
            while name in seen:
                name += str(i % 10)
            seen.add(name)
            rows.append((name, team))
            i += 1
    return rows


def team_users(rows: list[tuple[str, str]]) -> dict[str, list[str]]:
    """Each team's users, in users.csv order."""
    members: dict[str, list[str]] = {team: [] for team in TEAMS}
    for user, team in rows:
        members[team].append(user)
    return members
