package console

import (
	"net/url"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// Every action is a POST with a CSRF token (checked in authed), made as
// the signed-in principal: the coordinator checks its permission and
// records the action in the audit log as that principal's.

// form is the POSTed form's value called name.
func (req *request) form(name string) string { return req.r.PostFormValue(name) }

func (c *console) cancelJob(req *request) error {
	id := req.form("job_id")
	if _, err := c.api.jobs.CancelJob(req.ctx, &leaseholdv1.CancelJobRequest{JobId: id, Reason: req.form("reason")}); err != nil {
		return err
	}
	return c.done(req, "jobs/"+url.PathEscape(id), "Cancel requested.")
}

func (c *console) replayDead(req *request) error {
	id := req.form("job_id")
	out, err := c.api.admin.ReplayDeadJob(req.ctx, &leaseholdv1.ReplayDeadJobRequest{JobId: id, Reason: req.form("reason")})
	if err != nil {
		return err
	}
	msg := "Replayed " + id + " as " + out.GetJob().GetId() + "."
	if out.GetAlreadyReplayed() {
		msg = id + " was already replayed as " + out.GetJob().GetId() + "."
	}
	return c.done(req, "jobs/"+url.PathEscape(out.GetJob().GetId()), msg)
}

func (c *console) abandonDead(req *request) error {
	id := req.form("job_id")
	if _, err := c.api.admin.AbandonDeadJob(req.ctx, &leaseholdv1.AbandonDeadJobRequest{JobId: id, Reason: req.form("reason")}); err != nil {
		return err
	}
	return c.done(req, "dead", "Abandoned "+id+".")
}

func (c *console) pauseQueue(req *request) error {
	q := req.form("queue")
	if _, err := c.api.admin.PauseQueue(req.ctx, &leaseholdv1.PauseQueueRequest{Queue: q}); err != nil {
		return err
	}
	return c.done(req, "queues", "Paused "+q+".")
}

func (c *console) resumeQueue(req *request) error {
	q := req.form("queue")
	if _, err := c.api.admin.ResumeQueue(req.ctx, &leaseholdv1.ResumeQueueRequest{Queue: q}); err != nil {
		return err
	}
	return c.done(req, "queues", "Resumed "+q+".")
}

func (c *console) resetBreaker(req *request) error {
	dep := req.form("dependency")
	if _, err := c.api.admin.ResetBreaker(req.ctx, &leaseholdv1.ResetBreakerRequest{Dependency: dep, Reason: req.form("reason")}); err != nil {
		return err
	}
	return c.done(req, "breakers", "Reset the breaker of "+dep+".")
}

func (c *console) forceOpenBreaker(req *request) error {
	dep := req.form("dependency")
	in := &leaseholdv1.ForceOpenBreakerRequest{Dependency: dep, Reason: req.form("reason")}
	if s := req.form("duration"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			return invalid("duration", err.Error())
		}
		in.Duration = durationpb.New(d)
	}
	if _, err := c.api.admin.ForceOpenBreaker(req.ctx, in); err != nil {
		return err
	}
	return c.done(req, "breakers", "Forced the breaker of "+dep+" open.")
}

func (c *console) pauseSchedule(req *request) error {
	name := req.form("schedule")
	if _, err := c.api.schedules.PauseSchedule(req.ctx, &leaseholdv1.PauseScheduleRequest{Schedule: name, Reason: req.form("reason")}); err != nil {
		return err
	}
	return c.done(req, "schedules", "Paused schedule "+name+".")
}

func (c *console) resumeSchedule(req *request) error {
	name := req.form("schedule")
	if _, err := c.api.schedules.ResumeSchedule(req.ctx, &leaseholdv1.ResumeScheduleRequest{Schedule: name}); err != nil {
		return err
	}
	return c.done(req, "schedules", "Resumed schedule "+name+".")
}

func (c *console) triggerSchedule(req *request) error {
	name := req.form("schedule")
	out, err := c.api.schedules.TriggerSchedule(req.ctx, &leaseholdv1.TriggerScheduleRequest{Schedule: name})
	if err != nil {
		return err
	}
	return c.done(req, "schedules", "Triggered schedule "+name+": job "+out.GetRun().GetJobId()+".")
}

// createKey creates a key and shows its secret on this answer only.
func (c *console) createKey(req *request) error {
	role, ok := roleFromName(req.form("role"))
	if !ok {
		return invalid("role", "choose a role")
	}
	out, err := c.api.admin.CreateApiKey(req.ctx, &leaseholdv1.CreateApiKeyRequest{
		Name: req.form("name"), Role: role, Queues: splitList(req.form("queues")),
	})
	if err != nil {
		return err
	}
	return c.showKeys(req, out)
}

func (c *console) revokeKey(req *request) error {
	id := req.form("id")
	if _, err := c.api.admin.RevokeApiKey(req.ctx, &leaseholdv1.RevokeApiKeyRequest{Id: id}); err != nil {
		return err
	}
	return c.done(req, "keys", "Revoked key "+id+".")
}
