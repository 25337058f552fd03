package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
)

// An operator's controls of a campaign: each is compensator.Operator's, which the seckill
// campaign and compensate commands run too.

// campaignControl answers a control that changes the campaign with id through do.
func (s *Server) campaignControl(c echo.Context, do func(ctx context.Context, id string) (store.Campaign, error)) error {
	id := c.Param("id")
	if !events.ValidCampaignID(id) {
		return events.Errorf(events.CampaignNotFound, "campaign %q not found", id)
	}
	// A control runs to its end whether or not the admin waits: half of one is not an answer.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request().Context()), createTimeout)
	defer cancel()
	camp, err := do(ctx, id)
	// Even a control that answers an error may have changed the campaign (stored, with its Redis
	// step behind).
	s.changed(id)
	if err != nil {
		return ControlFailed(id, err, "sending this", `send "stock", the total, which adds nothing when sent again`)
	}
	view, err := s.viewCampaign(ctx, camp)
	if err != nil {
		return ControlUnshown(id, err, "GET it shortly")
	}
	return c.JSON(http.StatusOK, view)
}

// ControlFailed is the answer to a control of campaign id that failed with err, for the admin
// endpoints and the seckill campaign command alike: again names what the operator would run
// again, raise how to put units on sale so that running it again adds nothing.
func ControlFailed(id string, err error, again, raise string) error {
	if events.ErrorCode(err) == events.Internal {
		// Not the generic "changed nothing, try again": the store may have committed the change
		// and lost its answer, and an add sent again adds again.
		return events.Wrap(events.Unavailable, err, "campaign %q may have been changed: read it before %s again "+
			"(to put units on sale, %s)", id, again, raise)
	}
	return err
}

// ControlUnshown is the answer to a control of campaign id that is done, whose campaign could
// not be read back (err); read says how to read it instead.
func ControlUnshown(id string, err error, read string) error {
	// The control is done: an answer of the read's own ("changed nothing, try again", or the
	// sale's "being restored; try again") would have an add sent again, which adds again.
	return events.Wrap(events.Unavailable, err, "campaign %q was changed, but cannot be shown right now: %s", id, read)
}

func (s *Server) closeCampaign(c echo.Context) error {
	if err := noFields(c); err != nil {
		return err
	}
	return s.campaignControl(c, s.operator.Close)
}

type extendRequest struct {
	EndsAt *time.Time `json:"ends_at"`
}

func (s *Server) extendCampaign(c echo.Context) error {
	var req extendRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if req.EndsAt == nil {
		return events.Errorf(events.Invalid, "ends_at is required: the new end of the sale, RFC 3339")
	}
	return s.campaignControl(c, func(ctx context.Context, id string) (store.Campaign, error) {
		return s.operator.Extend(ctx, id, *req.EndsAt)
	})
}

// stockRequest is add (units to add) or stock (the total to raise the stock to: a retry of it
// adds nothing more).
type stockRequest struct {
	Add   *int64 `json:"add"`
	Stock *int64 `json:"stock"`
}

func (s *Server) addStock(c echo.Context) error {
	var req stockRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if (req.Add == nil) == (req.Stock == nil) {
		return events.Errorf(events.Invalid, "give add (how many units to put on sale) or stock (the total to raise it to), not both")
	}
	return s.campaignControl(c, func(ctx context.Context, id string) (store.Campaign, error) {
		if req.Stock != nil {
			return s.operator.RaiseStock(ctx, id, *req.Stock)
		}
		return s.operator.AddStock(ctx, id, *req.Add)
	})
}

// CancelResult is the answer of a campaign's cancel: the campaign, and what became of its orders.
type CancelResult struct {
	Campaign CampaignView `json:"campaign"`
	compensator.Tally
}

func (s *Server) cancelCampaign(c echo.Context) error {
	if err := noFields(c); err != nil {
		return err
	}
	id := c.Param("id")
	return s.bulk(c, func(ctx context.Context) (compensator.Tally, error) {
		if !events.ValidCampaignID(id) {
			return compensator.Tally{}, events.Errorf(events.CampaignNotFound, "campaign %q not found", id)
		}
		camp, tally, err := s.operator.Cancel(ctx, id, nil)
		if err != nil {
			return tally, err
		}
		view, err := s.viewCampaign(ctx, camp)
		if err != nil {
			return tally, ControlUnshown(id, err, "GET it shortly")
		}
		return tally, c.JSON(http.StatusOK, CancelResult{Campaign: view, Tally: tally})
	})
}

// tallyText says what a bulk run did to its orders.
func tallyText(t compensator.Tally) string {
	return fmt.Sprintf("released %d, refunded %d, unchanged %d", t.Released, t.Refunded, t.Unchanged)
}

type bulkCompensateRequest struct {
	// Status is pending (release the pending reservations) or confirmed (refund the confirmed
	// and paid orders); absent: both. Raw, so that null is told from absent.
	Status json.RawMessage `json:"status"`
}

func (s *Server) compensateCampaign(c echo.Context) error {
	pending, confirmed := true, true
	body, err := optionalBody(c)
	if err != nil {
		return err
	}
	if body != nil {
		var req bulkCompensateRequest
		if err := decodeJSON(body, &req); err != nil {
			return err
		}
		if req.Status != nil {
			var status string
			json.Unmarshal(req.Status, &status) // null or not a string: "", refused below
			switch status {
			case "pending":
				confirmed = false
			case "confirmed":
				pending = false
			default:
				return events.Errorf(events.Invalid, "status must be \"pending\" or \"confirmed\" (absent: both)")
			}
		}
	}
	id := c.Param("id")
	return s.bulk(c, func(ctx context.Context) (compensator.Tally, error) {
		if !events.ValidCampaignID(id) {
			return compensator.Tally{}, events.Errorf(events.CampaignNotFound, "campaign %q not found", id)
		}
		if _, err := s.store.Campaign(ctx, id); err != nil {
			return compensator.Tally{}, err
		}
		t, err := s.operator.CompensateCampaign(ctx, id, pending, confirmed, nil)
		if err != nil {
			return t, err
		}
		return t, c.JSON(http.StatusOK, t)
	})
}

// bulk runs a control over many orders: past the server's write timeout, and to its end when
// the admin stops waiting.
func (s *Server) bulk(c echo.Context, run func(ctx context.Context) (compensator.Tally, error)) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request().Context()), compensator.BulkTimeout)
	defer cancel()
	// An error here means the connection cannot take a later deadline (a test's recorder).
	_ = http.NewResponseController(c.Response()).SetWriteDeadline(time.Now().Add(compensator.BulkTimeout))
	t, err := run(ctx)
	s.changed(c.Param("id"))
	// A run that failed after resolving orders says what it did: the operator is not told it
	// again (a second run counts nothing the first did), as the seckill campaign command
	// prints it.
	resolved := t != (compensator.Tally{})
	switch {
	case events.ErrorCode(err) == events.Internal && resolved:
		return events.Wrap(events.Unavailable, err,
			"a dependency failed part way; resolved so far: %s; run this again to finish it", tallyText(t))
	case events.ErrorCode(err) == events.Internal:
		// A dependency failed part way: the orders resolved before it stay resolved, and one
		// may be half done (refunded in the store, its units still held in Redis). The generic
		// answer's "changed nothing" would be false; running the control again finishes it.
		return events.Wrap(events.Unavailable, err,
			"a dependency failed part way; some orders may be resolved already: run this again to finish it")
	case err != nil && resolved:
		return events.Wrap(events.ErrorCode(err), err, "%s; its orders: %s", events.ErrorMessage(err), tallyText(t))
	}
	return err
}

// adminOrder returns any buyer's order.
func (s *Server) adminOrder(c echo.Context) error {
	id := c.Param("id")
	if _, ok := events.CampaignOf(id); !ok {
		return events.Errorf(events.OrderNotFound, "order %q not found", id)
	}
	o, err := s.order(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, o)
}

// changed drops what this api keeps of campaign id, which a control or a compensation through it
// has changed: its sold-out flag (units given back or added are on sale here at once, at the
// other apis within SoldOutTTL) and its cached view (campaignTTL).
func (s *Server) changed(id string) {
	s.soldOut.clear(id)
	s.campaigns.forget(id)
}
