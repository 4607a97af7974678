"""CLARINET: clarification questions that find the book. A retrieval distribution over any retriever's top-k,
LLM question generation with a leak check, an oracle user simulator, language and explicit posteriors, random /
EIG / KL selection from a question pool, a distilled question generator, and the game that plays them."""
from pyterrier_tot.clarinet.distribution import RetrievalDistribution, softmax, top_mass
from pyterrier_tot.clarinet.game import ClarificationGame, GameTurn, plot_turns, turn_table
from pyterrier_tot.clarinet.leaks import forbidden, leaked, redact
from pyterrier_tot.clarinet.posterior import ExplicitPosterior, LanguagePosterior
from pyterrier_tot.clarinet.questions import Clarifier
from pyterrier_tot.clarinet.selection import (
                                              RandomSelection,
                                              UtilitySelection,
                                              expected_information_gain,
                                              kl_utility,
                                              selection,
)
from pyterrier_tot.clarinet.simulator import UserSimulator

__all__ = ["RetrievalDistribution", "softmax", "top_mass", "ClarificationGame", "GameTurn", "plot_turns",
           "turn_table", "forbidden", "leaked", "redact", "ExplicitPosterior", "LanguagePosterior", "Clarifier",
           "RandomSelection", "UtilitySelection", "expected_information_gain", "kl_utility", "selection",
           "UserSimulator"]
