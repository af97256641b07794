{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiJmNTBhMDBlYWQwZDYxZjA5MWFhZmY2OWZlNjNmMjRhYzk3ZTUxY2IyNDE3MDRlZDY0NmI0NzdiMzQyOWRhNDU2In0sIm5hbWUiOiJ0cmFuc2Zvcm1lcnMtaDIwMC1iYXRjaGVkX21tLnlhbWwifV19",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "iK4T5RV0JoY87Exme9/LYlbO6IVrRKU1aLOclhLabTMSNpF1yFXui/iTyOPBrqblhIJUeRK1+MajRTH0KvTcAQ==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
